"""The batch engine of the input path: classify records, apply them per user, count outcomes.

No Faust here: the worker passes a ``UserStore`` (its changelog table) and gets back the dead
letters. The outcome of a batch is the one of applying its records one at a time: each user's
records are applied in order to a working copy of the user's state (a ``Draft``, decoded once
from the stored bytes), then each touched user is encoded and written once and its partition
aggregate updated once. A written user's draft is kept (the most recent ``KEPT_USERS``): when
the store still holds exactly the bytes written then, the next batch that touches the user
continues from that draft and its contribution instead of decoding them again. The most
common record, a new report of a present user, is handled inline by ``common_report.stage``;
every other record by ``one_record.OneRecord`` (docs/design.md, "Throughput"). Nothing here computes
privacy quantities (theta depends only on public laws, docs/privacy.md).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Sequence
from typing import Any

from stream_app.domain import common_report, hold
from stream_app.domain.aggregate import Change, PartitionAggregate, contributions
from stream_app.domain.apply import Applier
from stream_app.domain.batch import (
    HELD,
    REPLAYED,
    DeadLetters,
    Letter,
    Record,
    Touched,
    UserStore,
    Written,
)
from stream_app.domain.draft import Draft
from stream_app.domain.inputs import tuple_new
from stream_app.domain.one_record import OneRecord, Staging
from stream_app.domain.outcomes import Outcomes
from stream_app.domain.partition_check import PartitionCheck
from stream_app.domain.rejection import Rejected
from stream_app.domain.rules import EventRules
from stream_app.metrics import Metrics
from stream_app.settings import Settings

# users whose written drafts are kept: 1.9 KiB each at K = 16 and 64 report ids (measured;
# ~2.7 KiB where the store keeps its own copy of the bytes, RocksDB): <= 45 MiB per worker
KEPT_USERS = 1 << 14


class Ingest:
    def __init__(
        self, settings: Settings, rules: EventRules, metrics: Metrics, store: UserStore
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.hold_rules = hold.HoldRules.of(settings)
        self.applier = Applier(rules, self.hold_rules, settings.topic_reports)
        self.partition_check = PartitionCheck(settings.input_partitions)
        self.records = OneRecord(settings, store, self.applier, self.partition_check)
        self.outcomes = Outcomes(metrics)
        # users as the batches wrote them, not touched since (at most KEPT_USERS, the newest)
        self._written: dict[str, Written] = {}

    def handle_batch(self, events: Sequence[Any]) -> DeadLetters:
        """Apply a batch of events (objects with ``.message``); dead letters in record order,
        then those of held reports refused at their user's join."""
        started = time.thread_time()
        staging = Staging(len(events), self._written)
        self.applier.now = time.time()
        s = self.settings
        common_report.stage(
            events, staging.touched, staging.is_report, s.topic_reports,
            self.records.shared_topic, s.max_payload_bytes, self.applier.rules,
            functools.partial(self.records.stage, staging),
            functools.partial(self.records.touch, staging))
        self._commit(staging.touched, events, staging.reasons)
        letters = self.outcomes.count(events, staging.touched, staging.reasons,
                                      staging.is_report, staging.details)
        self.metrics.reports_held.set(self.store.held_total())
        self.metrics.input_cpu_seconds.inc(time.thread_time() - started)
        return letters

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
        changes: dict[int, tuple[PartitionAggregate, list[Change]]] = {}  # by partition
        save, kept = self.store.save, self._written
        for (user_id, t), new in zip(plain, news, strict=True):
            last = events[t.steps[-1]]
            entry = changes.get(t.partition)
            if entry is None:
                # before the user's bytes change: a first call builds the aggregate from the
                # store
                entry = changes[t.partition] = (self.store.aggregate(t.partition, last), [])
            agg = entry[0]
            entry[1].append((t.old, new))
            t.note_offsets()
            draft = t.draft
            value = draft.to_bytes()
            save(user_id, value, last)
            agg.note_event(t.newest_ts, self.applier.now)
            agg.note_held(user_id, len(draft.held))
            kept[user_id] = tuple_new(Written, (value, draft, new))
        for agg, pending in changes.values():
            agg.replace_all(pending)
        for user_id in list(itertools.islice(kept, max(0, len(kept) - KEPT_USERS))):
            del kept[user_id]

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
                report, item = self.records.read(msg)
                kind = self.records.kind(report)
                if draft.replayed(kind, msg.partition, offset):
                    reasons[index] = REPLAYED
                    continue
                outcome = self.records.apply(t, user_id, item, report, msg.partition, offset)
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
            agg.note_event(item.ts, self.applier.now)
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
