"""Which Faust, mode and aiokafka attributes the modules of stream_app/faust_adapter/ use: read
from their source, for the canary (test_faust_canary.py) to check that each upstream function
among them is fingerprinted.

An attribute is found where the code reaches it through a receiver whose class is known:
``self`` (and a local bound to ``self``) in a class of ours with an upstream base, or in a mixin
of ours such a class uses; ``super()`` there; and attributes or locals named as in RECEIVERS
(``self._thread``, ``self.app``, ``event.message``, ...). The attribute is looked up along that
class's MRO, as Python does at run time: the upstream class that defines it is named. What a
receiver of unknown class reaches is not found (the canary's list adds it by hand).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from functools import cache
from typing import Any

import faust.events
import faust.sensors.monitor
import faust.streams
import faust.tables
import faust.tables.manager
import faust.tables.recovery
import faust.topics
import faust.transport.conductor
import faust.transport.utils
import faust.types.tuples
from faust.assignor import PartitionAssignor
from faust.transport.drivers.aiokafka import Producer

import stream_app.faust_adapter
from stream_app.faust_adapter.app import LeanApp
from stream_app.faust_adapter.consumer import (
    PufferfishConsumer,
    PufferfishTransport,
    TunedConsumerThread,
)
from stream_app.faust_adapter.flow import RefetchingFlowControl

UPSTREAM = ("faust", "mode", "aiokafka")

# the class of what an attribute (or a local variable) of this name holds in the adapter
RECEIVERS: dict[str, type] = {
    "_thread": TunedConsumerThread, "app": LeanApp, "consumer": PufferfishConsumer,
    "producer": Producer, "scheduler": faust.transport.utils.DefaultSchedulingStrategy,
    "topics": faust.transport.conductor.Conductor, "transport": PufferfishTransport,
    "flow_control": RefetchingFlowControl, "tables": faust.tables.manager.TableManager,
    "recovery": faust.tables.recovery.Recovery, "stream": faust.streams.Stream,
    "event": faust.events.Event, "message": faust.types.tuples.Message,
    "users": faust.tables.Table, "partials": faust.tables.Table,
    "changelog_topic": faust.topics.Topic, "deadletter_topic": faust.topics.Topic,
    "partials_topic": faust.topics.Topic, "inputs": faust.topics.Topic,
    "monitor": faust.sensors.monitor.Monitor, "assignor": PartitionAssignor,
}


def is_upstream(cls: type) -> bool:
    return cls.__module__.split(".")[0] in UPSTREAM


def adapter_modules() -> Iterator[Any]:
    for info in pkgutil.walk_packages(stream_app.faust_adapter.__path__,
                                      "stream_app.faust_adapter."):
        yield importlib.import_module(info.name)


def hosts(classes: tuple[type, ...]) -> dict[type, type]:
    """Each class of ours in the MRO of one of `classes` (itself, or a mixin it uses) -> the
    class whose instances its ``self`` is."""
    found: dict[type, type] = {}
    for cls in classes:
        for ours in cls.__mro__:
            if not is_upstream(ours) and ours is not object:
                found.setdefault(ours, cls)
    return found


@cache
def upstream_uses(classes: tuple[type, ...]) -> dict[str, frozenset[str]]:
    """``module:Qualname.attr`` of every upstream attribute the adapter's modules reach ->
    where (``module:Class``). `classes`: ours with an upstream base."""
    by_name = {cls.__name__: cls for cls in hosts(classes)}
    host_of = hosts(classes)
    uses: dict[str, set[str]] = {}
    for module in adapter_modules():
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                ours = by_name.get(node.name) or getattr(module, node.name, None)
                host = host_of.get(ours) if isinstance(ours, type) else None
                _Scan(uses, f"{module.__name__}:{node.name}", ours, host).visit(node)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.col_offset == 0:
                _Scan(uses, f"{module.__name__}:{node.name}", None, None).visit(node)
    return {name: frozenset(where) for name, where in uses.items()}


class _Scan(ast.NodeVisitor):
    def __init__(self, uses: dict[str, set[str]], where: str, ours: Any, host: type | None
                 ) -> None:
        self.uses, self.where, self.ours, self.host = uses, where, ours, host
        self.self_names = {"self"}

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if self.host is not None:  # e.g. ``consumer: Any = self`` (fetch.py)
            for sub in ast.walk(node):
                value = getattr(sub, "value", None)
                if (isinstance(sub, ast.Assign | ast.AnnAssign) and isinstance(value, ast.Name)
                        and value.id == "self"):
                    targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                    self.self_names |= {t.id for t in targets if isinstance(t, ast.Name)}
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.receiver(node)
        self.generic_visit(node)

    def receiver(self, node: ast.expr) -> tuple[type | None, type | None]:
        """The class `node` evaluates to an instance of (None: unknown), and where its MRO
        lookup starts (after this class: ``super()``)."""
        if isinstance(node, ast.Name):
            if node.id in self.self_names and self.host is not None:
                return self.host, None
            return RECEIVERS.get(node.id), None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "super" and self.host is not None):
            return self.host, self.ours
        if isinstance(node, ast.Attribute):
            cls, after = self.receiver(node.value)
            if cls is not None:
                self.record(cls, after, node.attr)
            return RECEIVERS.get(node.attr), None
        return None, None

    def record(self, cls: type, after: type | None, attr: str) -> None:
        mro = cls.__mro__
        if after is not None and after in mro:
            mro = mro[mro.index(after) + 1:]
        owner = next((base for base in mro if attr in base.__dict__), None)
        if owner is not None and is_upstream(owner):
            name = f"{owner.__module__}:{owner.__qualname__}.{attr}"
            self.uses.setdefault(name, set()).add(self.where)


def holds_code(name: str) -> bool:
    """Whether the upstream attribute is code (a function, property, class), not data (a
    class-level default, a slot, a signal): data is set by code that is fingerprinted."""
    module_name, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(module_name)
    *owners, attr = qualname.split(".")
    for part in owners:
        obj = getattr(obj, part)
    value = obj.__dict__[attr]
    value = getattr(value, "__func__", value)
    return (inspect.isfunction(value) or inspect.isclass(value)
            or isinstance(value, property) or hasattr(value, "_cached_property__get"))
