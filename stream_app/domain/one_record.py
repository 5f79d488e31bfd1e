"""The input path's general path: any record, one at a time, on its user's draft.

``common_report.stage`` hands it every record that is not a plain new report of a present
user (``OneRecord.stage``) and each user's first record of a batch (``OneRecord.touch``);
``Ingest`` replays a moved key's records through ``read``/``kind``/``apply``. The outcome of
a batch is the one of these steps, record after record (docs/design.md, "Throughput").
"""

from __future__ import annotations

import logging
from typing import Any

from stream_app.domain.apply import Applier
from stream_app.domain.batch import HELD, REPLAYED, Item, Touched, UserStore, Written, is_report_doc
from stream_app.domain.draft import MEMBERSHIP, REPORTS
from stream_app.domain.inputs import check_key, read_membership, read_report
from stream_app.domain.partition_check import PartitionCheck
from stream_app.domain.rejection import Rejected
from stream_app.settings import Settings

log = logging.getLogger(__name__)


class Staging:
    """What a batch's records leave: the touched users, each record's reason (None: applied)
    and kind, the users' kept drafts (taken out when touched) and refusal details."""

    __slots__ = ("touched", "reasons", "is_report", "written", "details")

    def __init__(self, n: int, written: dict[str, Written]) -> None:
        self.touched: dict[str, Touched] = {}
        self.reasons: list[str | None] = [None] * n
        self.is_report: list[bool] = [False] * n
        self.written = written
        self.details: dict[int, str] = {}


class OneRecord:
    def __init__(self, settings: Settings, store: UserStore, applier: Applier,
                 partition_check: PartitionCheck) -> None:
        self.settings = settings
        self.store = store
        self.applier = applier
        self.partition_check = partition_check
        # both kinds on one topic: a record's kind is its fields' ("event": membership)
        self.shared_topic = settings.topic_reports == settings.topic_membership

    def read(self, msg: Any) -> tuple[bool, Item]:
        """(is a report, the parsed record); Rejected."""
        s = self.settings
        if msg.topic == s.topic_reports and (not self.shared_topic or is_report_doc(msg.value)):
            return True, read_report(msg.value, s.max_payload_bytes)
        return False, read_membership(msg.value, s.max_payload_bytes)

    def apply(self, t: Touched, user_id: str, item: Item, report: bool, partition: int,
              offset: int | None) -> str | None:
        """One record on the user's draft: None (applied), HELD, or an ignore reason."""
        if report:
            return self.applier.report(t, item, partition, offset)  # type: ignore[arg-type]
        self.applier.membership(t, user_id, item, partition)  # type: ignore[arg-type]
        return None

    def kind(self, report: bool) -> int:
        """The record's offset sequence: one per input topic (one for both kinds when they
        share a topic)."""
        return REPORTS if report or self.shared_topic else MEMBERSHIP

    def touch(self, staging: Staging, user_id: str, event: Any) -> Touched | None:
        """The user's first record of the batch: key and partition checked, its state loaded
        (None: a check failed; nothing read or changed)."""
        msg = event.message
        key, partition = msg.key, msg.partition
        try:
            self._check(key, user_id, partition)
        except Rejected:
            return None
        return self._new(staging, user_id, key, partition, event)

    def _check(self, key: bytes | None, user_id: str, partition: int) -> None:
        """The key is the user_id, then the partitioning contract (before any state is read
        or changed); Rejected."""
        self.partition_check.check(check_key(key, user_id), partition)

    def _new(self, staging: Staging, user_id: str, key: bytes, partition: int,
             event: Any) -> Touched:
        t = staging.touched[user_id] = Touched(
            self.store.load(user_id, event), key, partition,
            staging.written.pop(user_id, None))
        return t

    def stage(self, staging: Staging, i: int, event: Any) -> None:
        """Record ``i`` of the batch, of any kind: applied, or its reason noted."""
        msg = event.message
        try:
            report, item = self.read(msg)
            staging.is_report[i] = report
            user_id, key, partition = item.user_id, msg.key, msg.partition
            t = staging.touched.get(user_id)
            if t is None or key != t.key or partition != t.partition:
                # (the same key and partition as the user's first record passed already)
                self._check(key, user_id, partition)
                if t is None:
                    t = self._new(staging, user_id, key, partition, event)
                elif partition != t.partition:
                    t.moved = True
            t.steps.append(i)
            offset, kind = msg.offset, self.kind(report)
            if t.replayed(kind, offset):
                outcome: str | None = REPLAYED
            else:
                outcome = self.apply(t, user_id, item, report, partition, offset)
                if offset is not None:
                    t.last[kind] = offset
        except Rejected as rej:
            staging.reasons[i] = rej.reason
            if rej.detail:
                staging.details[i] = rej.detail
            return
        except Exception as exc:  # noqa: BLE001 - one bad record must not stop the worker
            # only the type: an exception message could quote the record
            log.error("record could not be processed (%s); dead-lettered",
                      type(exc).__name__)
            staging.reasons[i] = "invalid_schema"
            return
        if outcome is not None:
            staging.reasons[i] = outcome
            if outcome != HELD:
                return
        t.accepted += 1
        if item.ts > t.newest_ts:
            t.newest_ts = item.ts
