"""The batch engine of the input path: classify records, apply them per user, count outcomes.

No Faust here: the worker passes a ``UserStore`` (its changelog table) and gets back the dead
letters. The outcome of a batch is the one of applying its records one at a time: each user's
records are applied in order to a working copy of the user's state (a ``Draft``, decoded once
from the stored bytes), then each touched user is encoded and written once and its partition
aggregate updated once. A user written by the previous batch keeps its draft: when the store
still holds exactly the bytes written then, the next batch continues from that draft and its
contribution instead of decoding them again (docs/design.md, "Throughput"). Nothing here
computes privacy quantities (theta depends only on public laws, docs/privacy.md).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from stream_app.contributions import Change, contributions, replace_all
from stream_app.metrics import EVENT_KINDS, REJECT_REASONS, Metrics
from stream_app.models import (
    MembershipIn,
    Rejected,
    ReportIn,
    check_key,
    read_membership,
    read_report,
    tuple_new,
)
from stream_app.partitioning import PartitionCheck
from stream_app.settings import Settings
from stream_app.state import (
    Contribution,
    Draft,
    EventRules,
    PartitionAggregate,
    UserState,
    apply_membership,
    apply_report,
)

log = logging.getLogger(__name__)

DeadLetters = list[tuple[str, bytes | None, str]]  # (source topic, raw bytes, reason)


Stored = bytes | str | dict[str, Any]  # a user's stored value (older versions: a dict)


class UserStore(Protocol):
    """Where user states live (the worker: a Faust changelog table): ``UserState.to_bytes()``
    per user."""

    def load(self, user_id: str, event: Any) -> Stored | None: ...

    def save(self, user_id: str, value: bytes, event: Any) -> None: ...

    def aggregate(self, partition: int, event: Any) -> PartitionAggregate: ...


class MemoryStore:
    """A ``UserStore`` on a plain dict (tests, benchmarks): like the worker's table it keeps
    ``UserState.to_bytes()`` per user and builds a partition's aggregate from the stored users
    the first time it is asked for."""

    def __init__(self) -> None:
        self.users: dict[str, Stored] = {}
        self.aggregates: dict[int, PartitionAggregate] = {}

    def load(self, user_id: str, event: Any = None) -> Stored | None:
        return self.users.get(user_id)

    def save(self, user_id: str, value: bytes, event: Any = None) -> None:
        self.users[user_id] = value

    def aggregate(self, partition: int, event: Any = None) -> PartitionAggregate:
        agg = self.aggregates.get(partition)
        if agg is None:
            users = [(u, UserState.from_stored(v)) for u, v in self.users.items()]
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


Item = ReportIn | MembershipIn


class Written(NamedTuple):
    """A user as the previous batch left it: the bytes it stored, and the draft and
    contribution those bytes decode to."""

    value: bytes
    draft: Draft
    contribution: Contribution


class _Touched:
    """One user's records in a batch: the stored value before it and the working draft."""

    __slots__ = ("stored", "old", "draft", "key", "partition", "moved", "steps", "accepted",
                 "newest_ts")

    def __init__(
        self, stored: Stored | None, key: bytes, partition: int, written: Written | None
    ) -> None:
        self.stored = stored
        self.old: Contribution | None
        if stored is None:
            self.draft = Draft(partition)
            self.old = None
        elif written is not None and written.value == stored:
            # the bytes the previous batch stored (equal bytes: equal state; nothing else wrote
            # this user since): its draft and contribution, without decoding them again
            self.draft, self.old = written.draft, written.contribution
        else:
            self.draft = Draft.decode(stored, partition)
            self.old = self.draft.contribution()
        self.key = key  # of the first record: checked (key and partition)
        self.partition = partition  # of the first record
        self.moved = False  # a record on another partition (then the records are replayed)
        self.steps: list[int] = []  # positions in the batch (ints: nothing for the GC to track)
        self.accepted = 0
        self.newest_ts = 0.0


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
        # the users written by the last batch (at most one batch's worth of drafts in memory)
        self._written: dict[str, Written] = {}

    def handle_batch(self, events: Sequence[Any]) -> DeadLetters:
        """Apply a batch of events (objects with ``.message``); dead letters in record order."""
        reasons: list[str | None] = [None] * len(events)
        is_report: list[bool] = [False] * len(events)
        touched: dict[str, _Touched] = {}
        written, self._written = self._written, {}
        self._stage(events, touched, reasons, is_report, written)
        self._commit(touched, events, reasons)
        rejected: Counter[str] = Counter()
        letters: DeadLetters = []
        if reasons.count(None) == len(reasons):  # nothing rejected (the common case)
            reports = sum(is_report)
            memberships = len(reasons) - reports
        else:
            reports = memberships = 0
            for i, reason in enumerate(reasons):
                if reason is None:
                    if is_report[i]:
                        reports += 1
                    else:
                        memberships += 1
                else:
                    rejected[reason] += 1
                    msg = events[i].message
                    letters.append((msg.topic, msg.value, reason))
        if reports:
            self._consumed["report"].inc(reports)
        if memberships:
            self._consumed["membership"].inc(memberships)
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
        self, events: Sequence[Any], touched: dict[str, _Touched], reasons: list[str | None],
        is_report: list[bool], written: dict[str, Written],
    ) -> None:
        """Classify each record and apply it to its user's draft; its reason or None."""
        s, rules, load = self.settings, self.rules, self.store.load
        reports_topic, max_bytes = s.topic_reports, s.max_payload_bytes
        check_partition = self.partition_check.check
        for i, event in enumerate(events):
            msg = event.message
            try:
                item: Item
                if msg.topic == reports_topic:
                    is_report[i] = True
                    item = read_report(msg.value, max_bytes)
                else:
                    item = read_membership(msg.value, max_bytes)
                user_id, key, partition = item.user_id, msg.key, msg.partition
                t = touched.get(user_id)
                if t is None or key != t.key or partition != t.partition:
                    # (the same key and partition as the user's first record passed already)
                    check_key(key, user_id)
                    # the partitioning contract, before any state is read or changed
                    check_partition(key, partition)
                    if t is None:
                        t = touched[user_id] = _Touched(
                            load(user_id, event), key, partition, written.get(user_id))
                    elif partition != t.partition:
                        t.moved = True
                t.steps.append(i)
                if is_report[i]:
                    t.draft.report(item, partition, rules)  # type: ignore[arg-type]
                else:
                    t.draft.membership(item, partition, rules)  # type: ignore[arg-type]
            except Rejected as rej:
                reasons[i] = rej.reason
                continue
            except Exception as exc:  # noqa: BLE001 - one bad record must not stop the worker
                # only the type: an exception message could quote the record
                log.error("record could not be processed (%s); dead-lettered",
                          type(exc).__name__)
                reasons[i] = "invalid_schema"
                continue
            t.accepted += 1
            if item.ts > t.newest_ts:
                t.newest_ts = item.ts

    def _commit(
        self, touched: dict[str, _Touched], events: Sequence[Any], reasons: list[str | None]
    ) -> None:
        """Write each touched user once (or replay its records when they span partitions);
        the aggregates get the batch's changes per partition at the end."""
        plain = []
        for user_id, t in touched.items():
            if not t.accepted:
                continue
            if t.moved:
                self._replay(user_id, t, events, reasons)
            else:
                plain.append((user_id, t))
        news = contributions([t.draft for _, t in plain])
        changes: dict[int, tuple[PartitionAggregate, list[Change]]] = {}
        for (user_id, t), new in zip(plain, news, strict=True):
            last = events[t.steps[-1]]
            # before the user's bytes change: a first call builds the aggregate from the store
            agg = self.store.aggregate(t.partition, last)
            entry = changes.get(id(agg))  # (the entry keeps agg alive: ids stay unique)
            if entry is None:
                entry = changes[id(agg)] = (agg, [])
            entry[1].append((t.old, new))
            value = t.draft.to_bytes()
            self.store.save(user_id, value, last)
            agg.note_event(t.newest_ts)
            self._written[user_id] = tuple_new(Written, (value, t.draft, new))
        for agg, pending in changes.values():
            replace_all(agg, pending)

    def _replay(
        self, user_id: str, t: _Touched, events: Sequence[Any], reasons: list[str | None]
    ) -> None:
        """Record by record, each on its own partition's aggregate (a key moved partitions)."""
        s = self.settings
        state = UserState.from_stored(t.stored) if t.stored is not None else None
        for index in t.steps:
            event = events[index]
            msg = event.message
            item: Item
            try:
                if msg.topic == s.topic_reports:
                    item = read_report(msg.value, s.max_payload_bytes)
                    new = apply_report(state, item, msg.partition, self.rules)
                else:
                    item = read_membership(msg.value, s.max_payload_bytes)
                    new = apply_membership(state, item, msg.partition, self.rules)
            except Rejected as rej:
                reasons[index] = rej.reason
                continue
            agg = self.store.aggregate(msg.partition, event)
            agg.apply(state, new)
            self.store.save(user_id, new.to_bytes(), event)
            agg.note_event(item.ts)
            reasons[index] = None
            state = new
