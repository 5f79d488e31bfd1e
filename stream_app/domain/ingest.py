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
from collections.abc import Sequence
from typing import Any

from stream_app.domain import hold
from stream_app.domain.aggregate import Change, PartitionAggregate, contributions
from stream_app.domain.apply import Applier
from stream_app.domain.batch import (
    HELD,
    REPLAYED,
    DeadLetters,
    Item,
    Letter,
    Record,
    Touched,
    UserStore,
    Written,
    is_report_doc,
)
from stream_app.domain.draft import MEMBERSHIP, REPORTS, Draft
from stream_app.domain.inputs import check_key, read_membership, read_report, tuple_new
from stream_app.domain.outcomes import Outcomes
from stream_app.domain.partition_check import PartitionCheck
from stream_app.domain.rejection import Rejected
from stream_app.domain.rules import EventRules
from stream_app.metrics import Metrics
from stream_app.settings import Settings

log = logging.getLogger(__name__)


class Ingest:
    def __init__(
        self, settings: Settings, rules: EventRules, metrics: Metrics, store: UserStore
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.hold_rules = hold.HoldRules.of(settings)
        self.applier = Applier(rules, self.hold_rules, settings.topic_reports)
        # both kinds on one topic: a record's kind is its fields' ("event": membership)
        self.shared_topic = settings.topic_reports == settings.topic_membership
        self.partition_check = PartitionCheck(settings.input_partitions)
        self.outcomes = Outcomes(metrics)
        # the users written by the last batch (at most one batch's worth of drafts in memory)
        self._written: dict[str, Written] = {}
        self._details: dict[int, str] = {}

    def handle_batch(self, events: Sequence[Any]) -> DeadLetters:
        """Apply a batch of events (objects with ``.message``); dead letters in record order,
        then those of held reports refused at their user's join."""
        reasons: list[str | None] = [None] * len(events)
        is_report: list[bool] = [False] * len(events)
        touched: dict[str, Touched] = {}
        written, self._written = self._written, {}
        self.applier.held_total, self.applier.now = self.store.held_total(), time.time()
        self._stage(events, touched, reasons, is_report, written)
        self._commit(touched, events, reasons)
        letters = self.outcomes.count(events, touched, reasons, is_report, self._details)
        self.metrics.reports_held.set(self.store.held_total())
        return letters

    def _read(self, msg: Any) -> tuple[bool, Item]:
        """(is a report, the parsed record); Rejected."""
        s = self.settings
        if msg.topic == s.topic_reports and (not self.shared_topic or is_report_doc(msg.value)):
            return True, read_report(msg.value, s.max_payload_bytes)
        return False, read_membership(msg.value, s.max_payload_bytes)

    def _apply(self, t: Touched, user_id: str, item: Item, report: bool, partition: int,
               offset: int | None) -> str | None:
        """One record on the user's draft: None (applied), HELD, or an ignore reason."""
        if report:
            return self.applier.report(t, item, partition, offset)  # type: ignore[arg-type]
        self.applier.membership(t, user_id, item, partition)  # type: ignore[arg-type]
        return None

    def _kind(self, report: bool) -> int:
        """The record's offset sequence: one per input topic (one for both kinds when they
        share a topic)."""
        return REPORTS if report or self.shared_topic else MEMBERSHIP

    def _stage(
        self, events: Sequence[Any], touched: dict[str, Touched], reasons: list[str | None],
        is_report: list[bool], written: dict[str, Written],
    ) -> None:
        """Classify each record and apply it to its user's draft; its reason or None."""
        load, check_partition = self.store.load, self.partition_check.check
        self._details = {}
        for i, event in enumerate(events):
            msg = event.message
            try:
                report, item = self._read(msg)
                is_report[i] = report
                user_id, key, partition = item.user_id, msg.key, msg.partition
                t = touched.get(user_id)
                if t is None or key != t.key or partition != t.partition:
                    # (the same key and partition as the user's first record passed already)
                    check_key(key, user_id)
                    # the partitioning contract, before any state is read or changed
                    check_partition(key, partition)
                    if t is None:
                        t = touched[user_id] = Touched(
                            load(user_id, event), key, partition, written.get(user_id))
                    elif partition != t.partition:
                        t.moved = True
                t.steps.append(i)
                offset, kind = msg.offset, self._kind(report)
                if t.replayed(kind, offset):
                    outcome: str | None = REPLAYED
                else:
                    outcome = self._apply(t, user_id, item, report, partition, offset)
                    if offset is not None:
                        t.last[kind] = offset
            except Rejected as rej:
                reasons[i] = rej.reason
                if rej.detail:
                    self._details[i] = rej.detail
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

    def _commit(
        self, touched: dict[str, Touched], events: Sequence[Any], reasons: list[str | None]
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
            agg.replace_all(pending)

    def _replay(
        self, user_id: str, t: Touched, events: Sequence[Any], reasons: list[str | None]
    ) -> None:
        """Record by record, each on its own partition's aggregate and offset sequence (a key
        moved partitions): the replay check against the draft as each record left it."""
        t.draft = draft = Draft.decode(t.stored, t.partition) if t.stored is not None \
            else Draft(t.partition)
        t.later = None
        for index in t.steps:
            event = events[index]
            msg = event.message
            old = draft.contribution() if draft.exists else None
            offset = getattr(msg, "offset", None)
            try:
                report, item = self._read(msg)
                kind = self._kind(report)
                if draft.replayed(kind, msg.partition, offset):
                    reasons[index] = REPLAYED
                    continue
                outcome = self._apply(t, user_id, item, report, msg.partition, offset)
            except Rejected as rej:
                reasons[index] = rej.reason
                continue
            draft.note_offset(kind, msg.partition, offset)
            reasons[index] = outcome
            if outcome is not None and outcome != HELD:
                continue
            agg = self.store.aggregate(msg.partition, event)
            agg.replace(old, draft.contribution())
            self.store.save(user_id, draft.to_bytes(), event)
            agg.note_event(item.ts)
            agg.note_held(user_id, len(draft.held))

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
            self.outcomes.rejected("not_present", len(letters))
        self.metrics.reports_held.set(self.store.held_total())
        return letters
