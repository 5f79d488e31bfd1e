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
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import orjson

from stream_app.domain import hold
from stream_app.domain.contributions import Change, contributions, replace_all
from stream_app.domain.models import (
    MembershipIn,
    Rejected,
    ReportIn,
    check_key,
    read_membership,
    read_report,
    tuple_new,
)
from stream_app.domain.state import (
    Contribution,
    Draft,
    EventRules,
    PartitionAggregate,
    UserState,
)
from stream_app.kafka.partitioning import PartitionCheck
from stream_app.metrics import EVENT_KINDS, IGNORE_REASONS, REJECT_REASONS, Metrics
from stream_app.settings import Settings

log = logging.getLogger(__name__)



class Letter(NamedTuple):
    """A dead letter's fields (stream_app.domain.models.dead_letter adds the time)."""

    topic: str  # the source topic
    raw: bytes | None
    reason: str
    partition: int | None = None
    offset: int | None = None
    detail: str | None = None


DeadLetters = list[Letter]

# outcomes of a record that are neither accepted nor refused (not dead-lettered)
HELD = "held"  # kept until its user joins (stream_app.domain.hold)
NOT_REFUSED = frozenset((HELD, *IGNORE_REASONS))


Stored = bytes | str | dict[str, Any]  # a user's stored value (older versions: a dict)


class UserStore(Protocol):
    """Where user states live (the worker: a Faust changelog table): ``UserState.to_bytes()``
    per user."""

    def load(self, user_id: str, event: Any) -> Stored | None: ...

    def save(self, user_id: str, value: bytes, event: Any) -> None: ...

    def aggregate(self, partition: int, event: Any) -> PartitionAggregate: ...

    def held_total(self) -> int:
        """Reports held by the users of the aggregates built so far (stream_app.domain.hold)."""
        ...


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

    def held_total(self) -> int:
        return sum(agg.held_count for agg in self.aggregates.values())


class Message(NamedTuple):
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    offset: int | None = None


class Record:
    """An input record outside Faust (tests, benchmarks): what ``handle_batch`` needs."""

    def __init__(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                 offset: int | None = None):
        self.message = Message(topic, partition, key, value, offset)


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
                 "newest_ts", "later", "seen_r", "seen_m", "last_r", "last_m")

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
        self.later: Later | None = None  # what applying held reports at a join gave
        # the input offsets (reports, membership) the stored state reflects here (-1:
        # none), and the newest of this batch (written to the draft when it is stored)
        o = self.draft.offsets
        if o is not None and o[0] == partition:
            self.seen_r, self.seen_m = o[1], o[2]
        else:
            self.seen_r = self.seen_m = -1
        self.last_r = self.last_m = -1

    def note_offsets(self) -> None:
        """The batch's newest offsets into the draft (before it is encoded)."""
        if self.last_r >= 0:
            self.draft.note_offset(1, self.partition, self.last_r)
        if self.last_m >= 0:
            self.draft.note_offset(2, self.partition, self.last_m)


class Later:
    """Outcomes of held reports applied at a join (they belong to earlier batches' records)."""

    __slots__ = ("applied", "late", "letters")

    def __init__(self) -> None:
        self.applied = 0
        self.late = 0
        self.letters: DeadLetters = []


def is_report_doc(raw: bytes | None) -> bool:
    """On a topic shared by both kinds: a record without an ``event`` field is a report (one
    that is not a JSON object is refused as a report would be)."""
    try:
        doc = orjson.loads(raw) if raw is not None else None
    except orjson.JSONDecodeError:
        return True
    return not (type(doc) is dict and "event" in doc)


class Ingest:
    def __init__(
        self, settings: Settings, rules: EventRules, metrics: Metrics, store: UserStore
    ) -> None:
        self.settings = settings
        self.rules = rules
        self.hold_rules = hold.HoldRules.of(settings)
        self.store = store
        self.metrics = metrics
        # both kinds on one topic: a record's kind is its fields' ("event": membership)
        self.shared_topic = settings.topic_reports == settings.topic_membership
        self.partition_check = PartitionCheck(settings.input_partitions)
        self._consumed = {k: metrics.events_consumed.labels(kind=k) for k in EVENT_KINDS}
        self._rejected = {r: metrics.events_rejected.labels(reason=r) for r in REJECT_REASONS}
        self._ignored = {r: metrics.events_ignored.labels(reason=r) for r in IGNORE_REASONS}
        # the users written by the last batch (at most one batch's worth of drafts in memory)
        self._written: dict[str, Written] = {}
        self._held_total = 0  # held reports on this worker (at the batch's start, plus its own)
        self._now = 0.0

    def handle_batch(self, events: Sequence[Any]) -> DeadLetters:
        """Apply a batch of events (objects with ``.message``); dead letters in record order,
        then those of held reports refused at their user's join."""
        reasons: list[str | None] = [None] * len(events)
        is_report: list[bool] = [False] * len(events)
        touched: dict[str, _Touched] = {}
        written, self._written = self._written, {}
        self._held_total, self._now = self.store.held_total(), time.time()
        self._stage(events, touched, reasons, is_report, written)
        self._commit(touched, events, reasons)
        outcomes: Counter[str] = Counter()
        letters: DeadLetters = []
        if reasons.count(None) == len(reasons):  # nothing refused or held (the common case)
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
                    continue
                outcomes[reason] += 1
                if reason not in NOT_REFUSED:
                    msg = events[i].message
                    letters.append(tuple_new(Letter, (
                        msg.topic, msg.value, reason, msg.partition,
                        getattr(msg, "offset", None), self._details.get(i))))
        for t in touched.values():
            if t.later is not None:
                reports += t.later.applied
                outcomes["late_after_leave"] += t.later.late
                letters.extend(t.later.letters)
                outcomes.update(letter.reason for letter in t.later.letters)
        if reports:
            self._consumed["report"].inc(reports)
        if memberships:
            self._consumed["membership"].inc(memberships)
        for reason, n in outcomes.items():
            if reason in self._rejected:
                self._rejected[reason].inc(n)
            elif reason in self._ignored:
                self._ignored[reason].inc(n)
        self.metrics.reports_held.set(self.store.held_total())
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
        s, load = self.settings, self.store.load
        reports_topic, max_bytes = s.topic_reports, s.max_payload_bytes
        shared = self.shared_topic
        check_partition = self.partition_check.check
        self._details: dict[int, str] = {}
        for i, event in enumerate(events):
            msg = event.message
            try:
                item: Item
                if msg.topic == reports_topic and (not shared or is_report_doc(msg.value)):
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
                offset = msg.offset
                # a record the stored state already reflects (its input offset): a replay
                # (one offset sequence per input topic: one for both kinds on a shared topic)
                on_reports = is_report[i] or shared
                if offset is not None and offset <= (t.seen_r if on_reports else t.seen_m):
                    outcome: str | None = "replayed"
                else:
                    if is_report[i]:
                        outcome = self._report(t, item, partition, offset)  # type: ignore[arg-type]
                    else:
                        outcome = self._membership(t, user_id, item, partition)  # type: ignore[arg-type]
                    if offset is not None:
                        if on_reports:
                            t.last_r = offset
                        else:
                            t.last_m = offset
            except Rejected as rej:
                reasons[i] = rej.reason
                detail = rej.detail
                if detail:
                    self._details[i] = detail
                continue
            except Exception as exc:  # noqa: BLE001 - one bad record must not stop the worker
                # only the type: an exception message could quote the record
                log.error("record could not be processed (%s); dead-lettered",
                          type(exc).__name__)
                reasons[i] = "invalid_schema"
                continue
            if outcome is not None:
                reasons[i] = outcome
                if outcome != HELD:
                    continue
            t.accepted += 1
            if item.ts > t.newest_ts:
                t.newest_ts = item.ts

    def _report(self, t: _Touched, report: ReportIn, partition: int,
                offset: int | None) -> str | None:
        try:
            t.draft.report(report, partition, self.rules)
        except Rejected as rej:
            if rej.reason != "not_present":
                raise
            return self._not_present(t.draft, report, partition, offset)
        return None

    def _membership(self, t: _Touched, user_id: str, event: MembershipIn,
                    partition: int) -> str | None:
        """A join/leave (a join applies the user's held reports); None, or Rejected."""
        t.draft.membership(event, partition, self.rules)
        if t.draft.held and t.draft.present:
            self._apply_held(t, user_id)
        return None

    def _apply(self, t: _Touched, user_id: str, item: Item, is_report: bool, partition: int,
               offset: int | None) -> str | None:
        """One record on the user's draft, its offset noted in the draft at once (the slow
        path of a user whose key moved partitions): None (applied), HELD, "replayed", or
        Rejected (the draft unchanged)."""
        # one offset sequence per input topic (one for both kinds when they share a topic)
        draft, kind = t.draft, 1 if is_report or self.shared_topic else 2
        if draft.replayed(kind, partition, offset):
            return "replayed"
        if is_report:
            outcome = self._report(t, item, partition, offset)  # type: ignore[arg-type]
        else:
            outcome = self._membership(t, user_id, item, partition)  # type: ignore[arg-type]
        draft.note_offset(kind, partition, offset)
        return outcome

    def _not_present(self, draft: Draft, report: ReportIn, partition: int,
                     offset: int | None) -> str:
        """A report of a user who is not present: late, held, or refused (with the reason)."""
        if hold.before_leave(draft, report.ts):
            return "late_after_leave"
        why = hold.refusal(draft, self.hold_rules, self._held_total)
        if why is not None:
            raise Rejected("not_present", why)
        hold.hold(draft, report, partition, offset, self._now)
        self._held_total += 1
        return HELD

    def _apply_held(self, t: _Touched, user_id: str) -> None:
        """At the user's join: its held reports, oldest first, as if they came after it."""
        later = t.later = t.later or Later()
        draft = t.draft
        for report, h in hold.take_held(draft, user_id):
            self._held_total -= 1
            if hold.before_leave(draft, report.ts):
                later.late += 1
                continue
            try:
                draft.report(report, h.partition, self.rules)
            except Rejected as rej:
                raw = hold.encode(report)
                later.letters.append(Letter(self.settings.topic_reports, raw, rej.reason,
                                            h.partition, h.offset, rej.detail))
                continue
            later.applied += 1
            if report.ts > t.newest_ts:
                t.newest_ts = report.ts

    def _commit(
        self, touched: dict[str, _Touched], events: Sequence[Any], reasons: list[str | None]
    ) -> None:
        """Write each touched user once (or replay its records when they span partitions);
        the aggregates get the batch's changes per partition at the end."""
        plain = []
        for user_id, t in touched.items():
            if not t.accepted and t.later is None:
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
            t.note_offsets()
            value = t.draft.to_bytes()
            self.store.save(user_id, value, last)
            agg.note_event(t.newest_ts)
            agg.note_held(user_id, len(t.draft.held))
            self._written[user_id] = tuple_new(Written, (value, t.draft, new))
        for agg, pending in changes.values():
            replace_all(agg, pending)

    def _replay(
        self, user_id: str, t: _Touched, events: Sequence[Any], reasons: list[str | None]
    ) -> None:
        """Record by record, each on its own partition's aggregate (a key moved partitions)."""
        s = self.settings
        t.draft = Draft.decode(t.stored, t.partition) if t.stored is not None \
            else Draft(t.partition)
        t.later = None
        for index in t.steps:
            event = events[index]
            msg = event.message
            is_report = msg.topic == s.topic_reports and (
                not self.shared_topic or is_report_doc(msg.value))
            old = t.draft.contribution() if t.draft.exists else None
            try:
                item: Item = read_report(msg.value, s.max_payload_bytes) if is_report \
                    else read_membership(msg.value, s.max_payload_bytes)
                outcome = self._apply(t, user_id, item, is_report, msg.partition,
                                      getattr(msg, "offset", None))
            except Rejected as rej:
                reasons[index] = rej.reason
                continue
            reasons[index] = outcome
            if outcome is not None and outcome != HELD:
                continue
            agg = self.store.aggregate(msg.partition, event)
            agg.replace(old, t.draft.contribution())
            self.store.save(user_id, t.draft.to_bytes(), event)
            agg.note_event(item.ts)
            agg.note_held(user_id, len(t.draft.held))

    def expire_held(self, partitions: Sequence[int]) -> DeadLetters:
        """Dead letters (``not_present``) of the held reports whose grace has passed, on the
        given input partitions; their users written without them."""
        now, grace = time.time(), self.hold_rules.grace_seconds
        letters: DeadLetters = []
        topic = self.settings.topic_reports
        for partition in partitions:
            agg = self.store.aggregate(partition, None)
            for user_id in list(agg.held_users):
                event = Record(topic, partition, user_id.encode(), None)
                stored = self.store.load(user_id, event)
                if stored is None:
                    agg.note_held(user_id, 0)
                    continue
                draft = Draft.decode(stored, partition)
                gone = hold.expire(draft, user_id, now, grace)
                if not gone:
                    continue
                self._written.pop(user_id, None)
                self.store.save(user_id, draft.to_bytes(), event)
                agg.note_held(user_id, len(draft.held))
                letters.extend(Letter(topic, g.raw, "not_present", g.partition, g.offset,
                                      g.detail) for g in gone)
        if letters:
            self._rejected["not_present"].inc(len(letters))
        self.metrics.reports_held.set(self.store.held_total())
        return letters
