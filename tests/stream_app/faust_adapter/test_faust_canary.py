"""A canary for Faust, mode and aiokafka upgrades: the source of every upstream function the
worker overrides, replaces or reimplements, and of every one the drain loop, the write path and
the flow control call or rely on, is fingerprinted here. What the adapter's modules reach by
name is found in their source (upstream_uses.py; test_every_upstream_function_the_adapter_uses_
is_fingerprinted); test_faust_canary_coverage.py edits each listed function in a copy of its
module and sees this check fail.

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
import re
import textwrap
import tomllib
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import faust
import pytest
from aiokafka.consumer.fetcher import READ_COMMITTED, Fetcher
from packaging.requirements import Requirement

import stream_app
from stream_app.faust_adapter.app import app_options, new_app
from stream_app.faust_adapter.isolation import read_committed
from stream_app.faust_adapter.runner import worker_class
from stream_app.kafka.clients import ISOLATION_LEVEL
from stream_app.settings import Settings
from tests.stream_app.faust_adapter.upstream_uses import holds_code, upstream_uses

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
    # stream_app/faust_adapter/isolation.py: read_committed set on the client Faust built
    # (_create_worker_consumer above: Faust's read_uncommitted unless exactly_once), kept by
    # the client as given and handed to the Fetcher by start() (above), which reads it
    "aiokafka.consumer.consumer:AIOKafkaConsumer.__init__": "248ff1031ac3126f",
    "aiokafka.consumer.fetcher:Fetcher.__init__": "32f20192b8888b2b",
    # relied on inside by stream_app/faust_adapter/consumer.py
    "faust.transport.consumer:Consumer._wait_next_records": "42d8b2a2e3d8c0a5",
    "faust.transport.consumer:Consumer._add_gap": "13260a7e377d922c",
    "faust.transport.consumer:Consumer.perform_seek": "d3e8527bdb719700",
    "mode.services:Service.wait_first": "19fc80e7f3167aed",
    "aiokafka.consumer.consumer:AIOKafkaConsumer.start": "98fe0184c169ab2e",
    # the gate (alignment.py, client_view.py) and the gaps (gaps.py), issue 34
    "faust.transport.consumer:Consumer.on_partitions_assigned": "8cee14735fb5d8ea",
    "aiokafka.consumer.fetcher:Fetcher._get_actions_per_node": "ce1105e08135eb32",
    "aiokafka.consumer.fetcher:Fetcher._proc_fetch_request": "d86f4f9b7001c1f8",
    "aiokafka.consumer.fetcher:FetchResult.getall": "dab3256df06c4c03",
    "aiokafka.consumer.fetcher:PartitionRecords._unpack_records": "4a783bfda70fa2b0",
    "aiokafka.consumer.subscription_state:Assignment.state_value": "fe056725fd2e5fab",
    "aiokafka.consumer.subscription_state:Assignment.tps": "861a28bce4d51773",
    "aiokafka.consumer.subscription_state:TopicPartitionState.__init__": "bdbcdfbd91b754b3",
    "aiokafka.consumer.subscription_state:TopicPartitionState.position": "39432b4b2c36d644",
    "aiokafka.consumer.subscription_state:TopicPartitionState.has_valid_position":
        "0f0000c9bba6fd5e",
    "aiokafka.consumer.consumer:AIOKafkaConsumer.last_poll_timestamp": "90b6aae0da7608e6",
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
    # stream_app/faust_adapter/app.py: Faust's web server on a port of the OS's choosing
    "faust.app.base:App._new_web": "4b227dfc239ec9ac",
    "faust.app.base:App.web": "bea7c8c025066765",
    "faust.web.drivers.aiohttp:Web.__init__": "0fdfd5813231089e",
    "faust.web.drivers.aiohttp:Web._create_site": "e56ba51f90e5d6a7",
    "faust.web.drivers.aiohttp:Web._new_transport": "830dac7e20d17385",
    "faust.web.drivers.aiohttp:Web._new_transport_tcp": "071fc004ccdc6f77",
    "faust.web.drivers.aiohttp:Web.start_server": "67fa27a3a055513c",
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
    "mode.worker:Worker._schedule_shutdown": "9e6afd1d4e5d85a4",
    "mode.worker:Worker._on_sigterm": "eee4cd89712bebce",
    "mode.worker:Worker._on_sigint": "a2a84e1644a380a6",
    "mode.worker:Worker._setup_logging": "7ccb8bce99fd6522",
    # called by the drain loop (consumer.py, fetch.py): seeks and positions in the client thread
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.seek": "0b5a86023c259460",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.position": "c4327744d68d96d1",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.seek_wait": "3fb6bc768ac9bd17",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._seek_wait": "2f16c19b557c1f85",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.seek_to_committed":
        "3335d0ac3af169c7",
    # a seek in the client thread lands at a moment the drain loop cannot see (offsets.py,
    # ``seeking``; issue 44): aiokafka seeks one partition after another between round trips,
    # and mode's method queue runs two calls at once, so a fetch comes back meanwhile
    "aiokafka.consumer.consumer:AIOKafkaConsumer.seek_to_committed": "f2ed3a5d05b7664e",
    "mode.threads:MethodQueue.__init__": "fa91c097aedab7c6",
    "mode.threads:QueueServiceThread.method_queue": "d58f3b97663bf034",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.assignment": "eba9771a73eb26b9",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.highwater": "1e6e10b8367dd017",
    "faust.transport.consumer:ThreadDelegateConsumer._seek": "04b0baca2e0c1a26",
    "faust.transport.consumer:ThreadDelegateConsumer.position": "a6e88abf54d9e211",
    "faust.transport.consumer:ThreadDelegateConsumer.assignment": "12722060cd653c47",
    "faust.transport.consumer:ThreadDelegateConsumer.highwater": "bc385a842d00ad65",
    "aiokafka.consumer.consumer:AIOKafkaConsumer.seek": "7c509505f0d29618",
    "aiokafka.consumer.consumer:AIOKafkaConsumer.position": "1de64725ce0f1369",
    "aiokafka.consumer.consumer:AIOKafkaConsumer.highwater": "4dcda7f3c33abf68",
    "aiokafka.consumer.consumer:AIOKafkaConsumer.last_stable_offset": "41a635efa134177b",
    "aiokafka.consumer.consumer:AIOKafkaConsumer.assignment": "7fca53a7cd989968",
    # the fetch our getmany relies on: the client's getmany, the records' order and messages
    "faust.transport.consumer:ThreadDelegateConsumer._getmany": "30984c83c56dc171",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.getmany": "574e19518da6e743",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._fetch_records": "390594ddd941b59a",
    "aiokafka.consumer.fetcher:Fetcher.fetched_records": "2a68fb43d0429f99",
    "faust.transport.drivers.aiokafka:Consumer._to_message": "77122fdc6b30283b",
    "faust.transport.utils:DefaultSchedulingStrategy.iterate": "2958a8abeec07cd9",
    "faust.transport.utils:DefaultSchedulingStrategy.map_from_records": "eaa43cd53b826c43",
    "faust.transport.utils:DefaultSchedulingStrategy.records_iterator": "24c382de432a8749",
    "faust.sensors.monitor:Monitor.track_tp_end_offset": "cd8338a4cb015495",
    "faust.transport.conductor:Conductor._compile_message_handler": "8106e91cd0136634",
    "faust.transport.conductor:Conductor.acks_enabled_for": "4179761a8c21891d",
    # acks and commits: what may be committed after a hand-off, a gap or a lost write
    "faust.transport.consumer:Consumer.__init__": "26a68f154b118301",
    "faust.transport.consumer:Consumer.ack": "8c9d7f355ca61f50",
    "faust.transport.consumer:Consumer.track_message": "bd5ed0a7fb599991",
    "faust.transport.consumer:Consumer._new_offset": "66fff896254f9b84",
    "faust.transport.consumer:Consumer.force_commit": "2fec4fdd5eddaea3",
    "faust.transport.consumer:Consumer.maybe_wait_for_commit_to_finish": "60f617aba8341e4f",
    "faust.transport.consumer:Consumer._commit_tps": "3f541beaeb56ccd7",
    "faust.transport.consumer:Consumer._filter_committable_offsets": "f05ad041ca05ec99",
    "faust.transport.consumer:Consumer._filter_tps_with_pending_acks": "7b5e9b3c9f1b8056",
    "faust.transport.consumer:Consumer._should_commit": "f364ecf8620dfc7c",
    "faust.transport.consumer:Consumer._handle_attached": "a234e0d217842fdb",
    "faust.transport.consumer:Consumer._commit_offsets": "469ed514dff09b09",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.commit": "ce933577f4596de0",
    "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread._commit": "3659c476fd1863d2",
    "aiokafka.consumer.consumer:AIOKafkaConsumer.commit": "18907618ba3ac434",
    "faust.transport.consumer:Consumer.wait_empty": "1bfa55135e0a41f4",
    "faust.transport.consumer:Consumer.on_stop": "7aaae78b4bf22569",
    "faust.transport.consumer:Consumer.commit_and_end_transactions": "4f0a9fbf2e5d982f",
    "faust.events:Event.ack": "dcbf6539ec783d88",
    "faust.types.tuples:Message.ack": "68566d10c1aa8e21",
    "faust.types.tuples:Message.incref": "50ae4a1bb8e28c91",
    "faust.types.tuples:Message.decref": "b31b94b4ab4b853a",
    "faust.types.tuples:ConsumerMessage.on_final_ack": "0a0f3b85deaa4353",
    # flow control: which partitions are fetched, when the flow is stopped and resumed
    "faust.transport.consumer:Consumer._get_active_partitions": "6b98b2ea23ded9c4",
    "faust.transport.consumer:Consumer.pause_partitions": "d0f9e0e6afbab671",
    "faust.transport.consumer:Consumer.resume_partitions": "91deaa77fada87bb",
    "faust.transport.consumer:Consumer.resume_flow": "e6395592abce8549",
    "mode.utils.queues:FlowControlEvent.suspend": "852da0ad3346160c",
    "mode.utils.queues:FlowControlEvent.is_active": "0c26224edcfc7401",
    "mode.utils.queues:FlowControlEvent.manage_queue": "7fd18963c726eb06",
    # the write path (input_agent.py, user_table.py): sends whose futures are the broker's acks
    "faust.transport.drivers.aiokafka:Producer.send": "e87f08d4e6c7711b",
    "aiokafka.producer.producer:AIOKafkaProducer.send": "c46ed7b048deb6b2",
    "faust.topics:Topic.send": "322e731e35b6e241",
    "faust.topics:Topic.publish_message": "c6f54438c50a2ed2",
    "faust.channels:Channel._send_now": "49f3b3565fd7a23d",
    "faust.topics:Topic.get_topic_name": "672604921e027525",
    "faust.tables.base:Collection.changelog_topic": "ccfd7a9eb7699512",
    "faust.tables.base:Collection.data": "f528007488bebde5",
    "faust.stores.rocksdb:Store.set_persisted_offset": "d01671f77ff8fd04",
    # the app and service attributes the adapter reads
    "faust.app.base:App.producer": "36b6dde172b0821a",
    "faust.app.base:App.consumer": "e222b180c92648d1",
    "faust.app.base:App.topics": "9d22abb79669271b",
    "faust.app.base:App.monitor": "774e96d72668591d",
    "faust.app.base:App.conf": "8185b1972a7e3da2",
    "mode.services:Service.should_stop": "25a32eca61bf5435",
    "mode.services:Service.sleep": "1b4a459fc96bc2ae",
    "mode.services:Service.beacon": "616ea07648e44d14",
    "mode.services:ServiceBase.loop": "47d71a4a3e754382",
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


def resolve(name: str, module: ModuleType | None = None) -> Any:
    """The function (or class) `module:Qualname.attr` names, as defined, unbound (looked up in
    `module` instead of the installed one when given: an edited copy)."""
    module_name, _, qualname = name.partition(":")
    obj: Any = module if module is not None else importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = obj.__dict__[part] if isinstance(obj, type) else getattr(obj, part)
    for inner in ("fget", "__func__", "_cached_property__get"):  # property, classmethod, mode's
        obj = getattr(obj, inner, obj)
    return obj


@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_upstream_source_is_the_one_we_checked(name: str) -> None:
    check_fingerprint(name)


def check_fingerprint(name: str, module: ModuleType | None = None) -> None:
    """The canary's check of one function (in `module` when given: see
    test_faust_canary_coverage.py)."""
    got = fingerprint(resolve(name, module))
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


# upstream code the adapter reaches (upstream_uses.py) that has no fingerprint, and why
NOT_FINGERPRINTED = {
    **dict.fromkeys((
        "faust.app.base:App.agent", "faust.app.base:App.timer", "faust.app.base:App.topic",
        "faust.app.base:App.Table", "faust.app.base:App.assignor", "faust.app.base:App.tables",
        "faust.app.base:App.task",
        "faust.streams:Stream.events", "faust.tables.manager:TableManager.recovery",
        "faust.assignor.partition_assignor:PartitionAssignor.assigned_actives",
        "mode.utils.collections:FastUserDict.items",
    ), "Faust's public API, as documented (worker.py builds the app with it)"),
    "mode.services:Service.add_future": "the SIGUSR1 dump (runner.py) only",
}


def test_every_upstream_function_the_adapter_uses_is_fingerprinted() -> None:
    """What the drain loop, the write path and the flow control call or read upstream, found in
    the source of stream_app/faust_adapter/ (upstream_uses.py), is fingerprinted; what they
    rely on without naming it (Consumer.ack, Consumer._new_offset, ...) is listed by hand."""
    uses = upstream_uses(project_subclasses())
    assert {"faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.seek",
            "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread.position",
            "faust.transport.consumer:Consumer.commit",
            "faust.transport.drivers.aiokafka:Producer.send"} <= set(uses)  # the scan sees
    missing = {f"{name} (used in {sorted(where)})" for name, where in uses.items()
               if holds_code(name) and COVERED_BY.get(name, name) not in FINGERPRINTS
               and name not in NOT_FINGERPRINTED}
    assert not missing, f"upstream code used without a fingerprint: {missing}; add each to " \
                        f"FINGERPRINTS and to {DOC}"


def test_the_upgrade_checklist_names_every_fingerprinted_function() -> None:
    """docs/design.md's checklist and FINGERPRINTS list the same functions: each fingerprinted
    `Qualname.attr` is named in the section."""
    design = (Path(stream_app.__file__).parents[1] / "docs" / "design.md").read_text()
    section = design.split("## After a Faust, mode or aiokafka upgrade", 1)[1].split("\n## ")[0]
    named = set(re.findall(r"`([\w.]+)`", section))
    unnamed = {name for name in FINGERPRINTS
               if not any(n in (name.replace(":", "."), name.partition(":")[2])
                          or n.endswith("." + name.partition(":")[2]) for n in named)}
    assert not unnamed, f"fingerprinted but not in {DOC}: {sorted(unnamed)}"


# --- the isolation level (stream_app/faust_adapter/isolation.py; issue 44) -------------------

def _client(app: Any) -> Any:
    """The aiokafka consumer Faust builds for `app`'s worker (not started)."""
    consumer = app.consumer
    return consumer._thread._create_worker_consumer(consumer.transport)


async def test_the_worker_reads_committed_records_where_faust_would_not() -> None:
    """Faust builds its client with read_uncommitted for the worker's processing guarantee
    (at_least_once): the records of aborted transactions reach the streams. The worker's client
    reads committed records only, through the Fetcher its start() builds. If Faust starts
    reading committed records itself (or builds its client elsewhere), this fails: re-check
    isolation.py as DOC says, entry `AIOKafkaConsumerThread._create_worker_consumer`."""
    settings = Settings()
    options = {**app_options(settings), "broker": "kafka://127.0.0.1:1",
               "store": "memory://", "web_enabled": False}
    assert options["processing_guarantee"] == "at_least_once"
    stock = _client(faust.App("canary-stock", **options))
    ours = _client(new_app(settings, "canary-ours", **options))
    try:
        assert stock._isolation_level == "read_uncommitted"
        assert ours._isolation_level == ISOLATION_LEVEL == "read_committed"
        # what start() hands the Fetcher (its source is fingerprinted above)
        fetcher = Fetcher(ours._client, ours._subscription,
                          isolation_level=ours._isolation_level)
        assert fetcher._isolation_level == READ_COMMITTED
        await fetcher.close()
    finally:
        await stock.stop()
        await ours.stop()


async def test_read_committed_refuses_a_client_it_cannot_set() -> None:
    """A client without aiokafka's `_isolation_level`, or one already started, fails the
    worker's start instead of reading uncommitted records."""
    with pytest.raises(RuntimeError, match="aiokafka or Faust changed"):
        read_committed(SimpleNamespace(_fetcher=None))
    with pytest.raises(RuntimeError, match="aiokafka or Faust changed"):
        read_committed(SimpleNamespace(_isolation_level="read_uncommitted", _fetcher=object()))
    client = SimpleNamespace(_isolation_level="read_uncommitted", _fetcher=None)
    read_committed(client)
    assert client._isolation_level == "read_committed"
