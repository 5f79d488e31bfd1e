"""The input path's most common record in one loop: a new report of a present user.

``stage`` walks a batch once. A record takes the fused path when it is a report on the
reports topic that ``read_report`` accepts without the models, of a user who is present, on
the key and partition the user's first record of the batch had (checked then), not a replay,
with a value of the domain, a report id none of the user's kept digests match and a histogram
of the domain's length. It is then applied as ``Draft.report`` would apply it, and counted as
``OneRecord.stage`` would count it. A user's first record of the batch is checked (key,
partition) and the user's state loaded by ``touch`` first. Any other record goes to
``stage_one`` (the general path, stream_app/domain/one_record.py: the hold, rejections,
memberships, replays, a moved key), so its outcome is that path's. docs/design.md,
"Throughput" (measured there); equivalence: tests/stream_app/domain/test_common_report.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from stream_app.domain.batch import Touched
from stream_app.domain.digests import DIGEST_BYTES
from stream_app.domain.draft import REPORTS
from stream_app.domain.inputs import ID_MAX
from stream_app.domain.rules import EventRules

_INF = float("inf")

StageOne = Callable[[int, Any], None]  # the general path for record i
# a user's first record of the batch: its key and partition checked, its Touched made (None:
# a check failed, the general path decides)
Touch = Callable[[str, Any], Touched | None]


def stage(
    events: Sequence[Any], touched: dict[str, Touched], is_report: list[bool],
    reports_topic: str, shared_topic: bool, max_bytes: int, rules: EventRules,
    stage_one: StageOne, touch: Touch,
) -> None:
    """Each record of the batch: the fused path, or ``stage_one(i, event)``."""
    loads, decode_error, blake2b = orjson.loads, orjson.JSONDecodeError, hashlib.blake2b
    values = rules.report_values  # type: ignore[attr-defined]
    k, window = len(rules.domain), rules.dedup_window * DIGEST_BYTES
    admission = rules.admission  # tree mode: Draft.report's admission, inline below
    for i, event in enumerate(events):
        msg = event.message
        raw = msg.value
        if msg.topic != reports_topic or raw is None or len(raw) > max_bytes:
            stage_one(i, event)
            continue
        try:
            doc = loads(raw)
        except decode_error:
            stage_one(i, event)
            continue
        if type(doc) is not dict or (shared_topic and "event" in doc):
            stage_one(i, event)
            continue
        uid, value, rid, ts = doc.get("user_id"), doc.get("value"), doc.get("report_id"), \
            doc.get("ts")
        # read_report's acceptance
        if type(uid) is not str or not 0 < len(uid) <= ID_MAX or type(rid) is not str \
                or not 0 < len(rid) <= ID_MAX or type(value) is not float \
                or not -_INF < value < _INF or type(ts) is not float or not 0.0 <= ts < _INF:
            stage_one(i, event)
            continue
        t = touched.get(uid)
        if t is None:
            t = touch(uid, event)
            if t is None:
                stage_one(i, event)
                continue
        offset = msg.offset
        # then everything Draft.report would refuse or hold
        if msg.key != t.key or msg.partition != t.partition or t.moved \
                or (offset is not None and offset <= t.seen[REPORTS]):
            stage_one(i, event)
            continue
        draft = t.draft
        hit = values.get(value)
        if not draft.present or hit is None or len(draft.counts) != k:
            stage_one(i, event)
            continue
        digest = blake2b(rid.encode("utf-8", "surrogatepass"), digest_size=DIGEST_BYTES).digest()
        ids = draft.ids
        if ids.find(digest) >= 0:  # a duplicate, or a match across two digests
            stage_one(i, event)
            continue
        # Draft.report's changes, in its order
        draft.counts[hit[0]] += 1
        ids += digest
        extra = len(ids) - window
        if extra > 0:
            del ids[:extra]
        before = draft.value_units  # (present: the raw contribution, None for 0)
        if draft.value_ts is None or ts >= draft.value_ts:
            draft.value_units, draft.value_ts = hit[1], ts
        draft.partition = t.partition
        if admission is not None:
            draft.admitted = admission.admit(draft.admitted, before or 0, draft.value_units or 0)
        # OneRecord.stage's bookkeeping of an applied report
        is_report[i] = True
        t.steps.append(i)
        if offset is not None:
            t.last[REPORTS] = offset
        t.accepted += 1
        if ts > t.newest_ts:
            t.newest_ts = ts
