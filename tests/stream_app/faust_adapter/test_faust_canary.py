"""A canary for Faust, mode and aiokafka upgrades: the source of every upstream function the
worker overrides, replaces, reimplements or relies on inside is fingerprinted here.

A fingerprint is the sha256 (first 16 hex digits) of the function's source, dedented, without
blank lines, full-line comments or trailing blanks. A mismatch means upstream changed the
function: re-check what docs/design.md, "After a Faust, mode or aiokafka upgrade", says about
it, adapt our code if needed, then record the new fingerprint below (and the new version in
RECORDED_ON and the pins of pyproject.toml). Every attribute our Faust subclasses shadow must be
listed (test_every_shadowed_upstream_attribute_is_fingerprinted), so a new override, or an
upstream release that adds a name we already use, fails here too.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import pkgutil
import textwrap
import tomllib
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

import stream_app
from stream_app.faust_adapter.runner import worker_class

DOC = 'docs/design.md, "After a Faust, mode or aiokafka upgrade"'
RECORDED_ON = {"faust-streaming": "0.15.3", "mode-streaming": "0.7.1", "aiokafka": "0.14.0"}
UPSTREAM = ("faust", "mode", "aiokafka")

FINGERPRINTS = {
    # overridden or replaced by stream_app/faust_adapter/consumer.py
    "faust.transport.consumer:Consumer._drain_messages": "292ceca32fb5f90c",
    "faust.transport.consumer:Consumer.getmany": "0f156ece3d37846f",
    "faust.transport.consumer:Consumer.seek": "c8a69bbd338bf09c",
    "faust.transport.consumer:ThreadDelegateConsumer.seek_wait": "1810b65209f1f678",
    "faust.transport.consumer:ThreadDelegateConsumer.seek_to_committed": "953c48a641a566e2",
    "faust.transport.consumer:Consumer.on_partitions_revoked": "2cbb93507a238e38",
    "faust.transport.consumer:ThreadDelegateConsumer.__init__": "8808053470854617",
    "faust.transport.drivers.aiokafka:Consumer._new_consumer_thread": "c4a2821269c4f9d3",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._create_worker_consumer":
        "80377d303e50d401",
    "faust.transport.base:Transport.create_consumer": "c1f93077b70205e3",
    # relied on inside by stream_app/faust_adapter/consumer.py
    "faust.transport.consumer:Consumer._wait_next_records": "42d8b2a2e3d8c0a5",
    "faust.transport.consumer:Consumer._add_gap": "13260a7e377d922c",
    "faust.transport.consumer:Consumer.perform_seek": "d3e8527bdb719700",
    "mode.services:Service.wait_first": "19fc80e7f3167aed",
    "aiokafka.consumer.consumer:AIOKafkaConsumer.start": "98fe0184c169ab2e",
    # stream_app/faust_adapter/app.py and faust_flow.py
    "faust.app.base:App._new_transport": "ad3271170e9cdaf1",
    "faust.app.base:App.flow_control": "640417b3c723f9a0",
    "faust.app.base:App.on_init_dependencies": "7b245941676f262d",
    "mode.utils.queues:FlowControlEvent.__init__": "4b6cf9fc6235544f",
    "mode.utils.queues:FlowControlEvent.clear": "a05004862c3967cc",
    "mode.utils.queues:FlowControlEvent.resume": "9cc7fb6b619c5810",
    "mode.utils.queues:FlowControlQueue.clear": "2feed9a4f3cffbb8",
    "faust.tables.recovery:Recovery._resume_streams": "5d134dc4251d1841",
    "faust.web.base:Web._enabled_blueprints": "43d2704304358002",
    # stream_app/faust_adapter/flow_stop.py: Faust stops the flow, then waits for the acks
    "faust.transport.consumer:Consumer.stop_flow": "e74224d39c5c9616",
    "faust.app.base:App._on_partitions_revoked": "eb7d2a49c65932c5",
    "faust.app.base:App._stop_consumer": "d5ad74f5ac05a30f",
    # stream_app/faust_adapter/commit_guard.py: no commit through a stopping client thread
    "faust.transport.consumer:ThreadDelegateConsumer._commit": "0002b9f4debc8fe6",
    "mode.threads:QueueServiceThread.on_thread_stop": "b1a838e855aafbf3",
    "mode.threads:QueueServiceThread.call_thread": "0c695a488958a873",
    "mode.services:Service.crash": "ddd66c00cc951a3d",
    # stream_app/faust_adapter/input_agent.py: the acked offsets committed before the crash
    "faust.transport.consumer:Consumer.commit": "ad56ad7314ef7f67",
    # stream_app/faust_adapter/worker.py: table writes without Faust's per-write path, batches
    "faust.streams:current_event": "3de913a78d85d158",
    "faust.stores.rocksdb:Store._set": "28bfcd3884f22543",
    "faust.stores.rocksdb:Store._get": "d90f6d283f8de281",
    "faust.stores.memory:Store": "e66d4ab2240562f7",
    # stream_app/faust_adapter/user_table.py: aggregates rebuilt from one partition's database
    "faust.stores.rocksdb:Store._visible_items": "17fe47dc23e7b76d",
    "faust.stores.rocksdb:Store._db_for_partition": "eda578d1f0766d49",
    "faust.tables.base:Collection._send_changelog": "ae17e3218637374b",
    "faust.tables.base:Collection.send_changelog": "8a6d1501eb54d020",
    "faust.tables.base:Collection._on_changelog_sent": "25fd20c92d0d80b2",
    "faust.streams:Stream.take_events": "734bd49eafa10109",
    # stream_app/faust_adapter/runner.py
    "faust.worker:Worker.on_setup_root_logger": "6d848b2186b3e638",
    "mode.worker:Worker._on_sigusr1": "c13e3b60fc373636",
}

# shadowed attributes whose upstream value is not a function: what is fingerprinted instead
COVERED_BY = {
    "faust.transport.drivers.aiokafka:Transport.Consumer":
        "faust.transport.base:Transport.create_consumer",
}
# set on every subclass by mode's and abc's metaclasses, not by us
METACLASS_NAMES = {"logger", "_abc_impl"}
# upstream state our code writes on purpose, as the upstream function it replaces does
SHARED_ON_PURPOSE = {"PufferfishConsumer._n_acked", "QuietWorker.spinner"}


def normalised_source(obj: Any) -> str:
    lines = textwrap.dedent(inspect.getsource(obj)).splitlines()
    return "\n".join(line.rstrip() for line in lines
                     if line.strip() and not line.lstrip().startswith("#"))


def fingerprint(obj: Any) -> str:
    return hashlib.sha256(normalised_source(obj).encode()).hexdigest()[:16]


def resolve(name: str) -> Any:
    """The function (or class) `module:Qualname.attr` names, as defined, unbound."""
    module_name, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = obj.__dict__[part] if isinstance(obj, type) else getattr(obj, part)
    for inner in ("fget", "__func__", "_cached_property__get"):  # property, classmethod, mode's
        obj = getattr(obj, inner, obj)
    return obj


@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_upstream_source_is_the_one_we_checked(name: str) -> None:
    got = fingerprint(resolve(name))
    installed = {dist: version(dist) for dist in RECORDED_ON}
    assert got == FINGERPRINTS[name], (
        f"{name} changed upstream (fingerprint {got}, recorded {FINGERPRINTS[name]} on "
        f"{RECORDED_ON}; installed {installed}). Re-check it as {DOC} says, entry "
        f"`{name.partition(':')[2]}`, then record the new fingerprint in {__file__}.")


@functools.cache
def project_subclasses() -> tuple[type, ...]:
    return tuple(_project_subclasses())


def _project_subclasses() -> Iterator[type]:
    """Every class of stream_app with a Faust, mode or aiokafka base (and runner's worker)."""
    yield worker_class()
    for info in pkgutil.walk_packages(stream_app.__path__, "stream_app."):
        if info.name.endswith("__main__"):
            continue  # runs the CLI
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and obj.__module__ == module.__name__
                    and any(upstream(base) for base in obj.__mro__[1:])):
                yield obj


def upstream(cls: type) -> bool:
    return cls.__module__.split(".")[0] in UPSTREAM


def shadowed(cls: type) -> Iterator[str]:
    """`module:Qualname.attr` of each upstream attribute a class of ours shadows, itself or
    through a mixin of ours in its MRO (e.g. commit_guard.CommitGuard._commit)."""
    mro = cls.__mro__
    for i, ours in enumerate(mro):
        if upstream(ours) or ours is object:
            continue
        for attr in ours.__dict__:
            if attr in METACLASS_NAMES or (attr.startswith("__") and attr != "__init__"):
                continue
            base = next((b for b in mro[i + 1:] if attr in b.__dict__), None)
            if base is not None and upstream(base):
                yield f"{base.__module__}:{base.__qualname__}.{attr}"


def test_every_shadowed_upstream_attribute_is_fingerprinted() -> None:
    classes = list(project_subclasses())
    assert {c.__name__ for c in classes} >= {
        "PufferfishConsumer", "TunedConsumerThread", "PufferfishTransport", "LeanApp",
        "RefetchingFlowControl", "QuietWorker"}
    missing = {f"{cls.__module__}.{cls.__qualname__} shadows {name}"
               for cls in classes for name in shadowed(cls)
               if COVERED_BY.get(name, name) not in FINGERPRINTS}
    assert not missing, (f"upstream attributes shadowed without a fingerprint: {missing}; add "
                         f"each to FINGERPRINTS and to {DOC}")


def attributes_set_on_self(cls: type) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name) and node.value.id == "self"}


def test_our_instance_attributes_are_unknown_upstream() -> None:
    """An upstream class that starts using a name our subclass keeps its own state in (e.g.
    `_guard`) would share it with us silently."""
    clashes = set()
    for cls in project_subclasses():
        ours = {a for a in attributes_set_on_self(cls)
                if f"{cls.__name__}.{a}" not in SHARED_ON_PURPOSE}
        for base in (b for b in cls.__mro__[1:] if upstream(b)):
            try:
                source = inspect.getsource(base)
            except (OSError, TypeError):
                continue
            clashes |= {f"{cls.__qualname__}.{attr} (also in {base.__qualname__})"
                        for attr in ours if attr in base.__dict__ or f"self.{attr}" in source}
    assert not clashes, (f"{clashes}: rename ours (or, when writing upstream state is the "
                         f"point, add it to SHARED_ON_PURPOSE and to {DOC})")


def test_pins_admit_the_versions_fingerprinted() -> None:
    pyproject = tomllib.loads((Path(stream_app.__file__).parents[1] / "pyproject.toml")
                              .read_text())
    pins = {Requirement(r).name: Requirement(r).specifier
            for r in pyproject["project"]["dependencies"]}
    for dist, recorded in RECORDED_ON.items():
        assert dist in pins and recorded in pins[dist], (dist, recorded, pins.get(dist))
        assert pins[dist].contains(version(dist)), (dist, version(dist), pins[dist])
