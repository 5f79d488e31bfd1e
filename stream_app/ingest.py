"""The batch engine of the input path: classify records, apply them per user, count outcomes.

No Faust here: the worker passes a ``UserStore`` (its changelog table) and gets back the dead
letters. The outcome of a batch is the one of applying its records one at a time: each user's
records are applied in order to a working copy of the user's state, then each touched user is
written once and its partition aggregate updated once. Nothing here computes privacy
quantities (theta depends only on public laws, docs/privacy.md).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from stream_app.metrics import EVENT_KINDS, REJECT_REASONS, Metrics
from stream_app.models import (
    Membership,
    Rejected,
    Report,
    check_key,
    parse_membership,
    parse_report,
)
from stream_app.partitioning import PartitionCheck
from stream_app.settings import Settings
from stream_app.state import (
    EventRules,
    PartitionAggregate,
    UserState,
    apply_membership,
    apply_report,
)

log = logging.getLogger(__name__)

DeadLetters = list[tuple[str, bytes | None, str]]  # (source topic, raw bytes, reason)


class UserStore(Protocol):
    """Where user states live (the worker: a Faust changelog table)."""

    def get(self, user_id: str, event: Any) -> UserState | None: ...

    def put(self, user_id: str, state: UserState, event: Any) -> None: ...

    def aggregate(self, partition: int, event: Any) -> PartitionAggregate: ...


class MemoryStore:
    """A ``UserStore`` on a plain dict (tests, benchmarks): like the worker's table it keeps
    ``UserState.to_json()`` per user, decodes it on every read, and builds a partition's
    aggregate from the stored users the first time it is asked for."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, Any]] = {}
        self.aggregates: dict[int, PartitionAggregate] = {}

    def get(self, user_id: str, event: Any = None) -> UserState | None:
        raw = self.users.get(user_id)
        return UserState.from_json(raw) if raw is not None else None

    def put(self, user_id: str, state: UserState, event: Any = None) -> None:
        self.users[user_id] = state.to_json()

    def aggregate(self, partition: int, event: Any = None) -> PartitionAggregate:
        agg = self.aggregates.get(partition)
        if agg is None:
            users = [(u, UserState.from_json(v)) for u, v in self.users.items()]
            agg = self.aggregates[partition] = PartitionAggregate.rebuild(partition, users)
        return agg


class Message(NamedTuple):
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None


class Record:
    """An input record outside Faust (tests, benchmarks): what ``handle_batch`` needs."""

    def __init__(self, topic: str, partition: int, key: bytes | None, value: bytes | None):
        self.message = Message(topic, partition, key, value)


@dataclass
class _Step:
    index: int  # position in the batch
    event: Any
    item: Report | Membership


@dataclass
class _Touched:
    """One user's records in a batch: the state before it and the working state."""

    old: UserState | None
    state: UserState | None
    steps: list[_Step] = field(default_factory=list)


class Ingest:
    def __init__(
        self, settings: Settings, rules: EventRules, metrics: Metrics, store: UserStore
    ) -> None:
        self.settings = settings
        self.rules = rules
        self.store = store
        self.partition_check = PartitionCheck(settings.input_partitions)
        self._consumed = {k: metrics.events_consumed.labels(kind=k) for k in EVENT_KINDS}
        self._rejected = {r: metrics.events_rejected.labels(reason=r) for r in REJECT_REASONS}

    def handle_batch(self, events: Sequence[Any]) -> DeadLetters:
        """Apply a batch of events (objects with ``.message``); dead letters in record order."""
        reasons: list[str | None] = [None] * len(events)
        kinds: list[str] = [""] * len(events)
        touched: dict[str, _Touched] = {}
        for i, event in enumerate(events):
            reasons[i] = self._stage(i, event, touched, kinds)
        for user_id, t in touched.items():
            self._commit(user_id, t, reasons)
        consumed: Counter[str] = Counter()
        rejected: Counter[str] = Counter()
        letters: DeadLetters = []
        for i, event in enumerate(events):
            reason = reasons[i]
            if reason is None:
                consumed[kinds[i]] += 1
            else:
                rejected[reason] += 1
                msg = event.message
                letters.append((msg.topic, msg.value, reason))
        for kind, n in consumed.items():
            self._consumed[kind].inc(n)
        for reason, n in rejected.items():
            self._rejected[reason].inc(n)
        return letters

    def handle(
        self, topic: str, partition: int, key: bytes | None, raw: bytes | None
    ) -> str | None:
        """One record; the dead-letter reason or None when accepted."""
        letters = self.handle_batch([Record(topic, partition, key, raw)])
        return letters[0][2] if letters else None

    def _stage(
        self, i: int, event: Any, touched: dict[str, _Touched], kinds: list[str]
    ) -> str | None:
        """Classify record i and apply it to its user's working state; the reason or None."""
        s = self.settings
        msg = event.message
        try:
            if msg.topic == s.topic_reports:
                item: Report | Membership = parse_report(msg.value, s.max_payload_bytes)
                kinds[i] = "report"
            else:
                item = parse_membership(msg.value, s.max_payload_bytes)
                kinds[i] = "membership"
            check_key(msg.key, item.user_id)
            # the partitioning contract, before any state is read or changed
            self.partition_check.check(msg.key, msg.partition)
            t = touched.get(item.user_id)
            if t is None:
                old = self.store.get(item.user_id, event)
                t = touched[item.user_id] = _Touched(old=old, state=old)
            t.steps.append(_Step(i, event, item))
            t.state = self._apply(t.state, item, msg.partition)
        except Rejected as rej:
            return rej.reason
        except Exception as exc:  # noqa: BLE001 - one bad record must not stop the worker
            # only the type: an exception message could quote the record
            log.error("record could not be processed (%s); dead-lettered", type(exc).__name__)
            return "invalid_schema"
        return None

    def _apply(
        self, state: UserState | None, item: Report | Membership, partition: int
    ) -> UserState:
        if isinstance(item, Report):
            return apply_report(state, item, partition, self.rules)
        return apply_membership(state, item, partition, self.rules)

    def _commit(self, user_id: str, t: _Touched, reasons: list[str | None]) -> None:
        """Write one touched user once (or replay its records when they span partitions)."""
        accepted = [step for step in t.steps if reasons[step.index] is None]
        if not accepted or t.state is None:
            return
        partitions = {step.event.message.partition for step in t.steps}
        if len(partitions) != 1:
            self._replay(user_id, t, reasons)
            return
        last = t.steps[-1].event
        agg = self.store.aggregate(partitions.pop(), last)
        agg.apply(t.old, t.state)
        self.store.put(user_id, t.state, last)
        for step in accepted:
            agg.note_event(step.item.ts)

    def _replay(self, user_id: str, t: _Touched, reasons: list[str | None]) -> None:
        """Record by record, each on its own partition's aggregate (a key moved partitions)."""
        state = t.old
        for step in t.steps:
            msg = step.event.message
            try:
                new = self._apply(state, step.item, msg.partition)
            except Rejected as rej:
                reasons[step.index] = rej.reason
                continue
            agg = self.store.aggregate(msg.partition, step.event)
            agg.apply(state, new)
            self.store.put(user_id, new, step.event)
            agg.note_event(step.item.ts)
            reasons[step.index] = None
            state = new
