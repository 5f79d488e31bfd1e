"""Wire records (JSON) and the classification of raw input bytes.

Only ``DeadLetter.raw`` ever carries input bytes (truncated), and only when the operator turned
on ``deadletter_include_raw``; reasons are fixed labels.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Literal, TypeVar

import orjson
from pydantic import BaseModel, Field, StringConstraints, ValidationError

from stream_app.domain import rejection

# the output records live in outputs.py (re-exported: models is the wire records' one import)
from stream_app.domain.outputs import PriorsRecord as PriorsRecord
from stream_app.domain.outputs import Release as Release
from stream_app.domain.rejection import Rejected
from stream_app.domain.wire import Wire

RAW_TRUNCATE_BYTES = 256

Identifier = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Timestamp = Annotated[float, Field(strict=True, ge=0)]


M = TypeVar("M", bound=Wire)


_USER_ID = (
    "The user's id, 1 to 128 characters. The record key must be this id as UTF-8 bytes "
    "(else key_mismatch), and the record's partition murmur2(key) mod input_partitions "
    "(else wrong_partition)."
)
_EVENT_TS = "Event time: seconds since the Unix epoch, a JSON number >= 0."


class Report(Wire):
    """One value reported by a user (topic ``reports``)."""

    user_id: Identifier = Field(description=_USER_ID)
    value: Annotated[float, Field(
        strict=True,
        description="The reported value: a finite JSON number (not a string) in the configured "
        "domain (else out_of_domain). A present user's newest report (by ts) is what counts "
        "in the sum.")]
    report_id: Identifier = Field(
        description="Unique per user, 1 to 128 characters: an id among the user's last "
        "dedup_window report ids is dead-lettered duplicate_report.")
    ts: Timestamp = Field(description=_EVENT_TS)


class Membership(Wire):
    """A user joins or leaves (topic ``membership``)."""

    user_id: Identifier = Field(description=_USER_ID)
    event: Literal["join", "leave"] = Field(
        description="join: the user becomes present (already present: already_present); "
        "leave: the user is no longer counted (not present: unknown_user).")
    group: Identifier | None = Field(
        default=None,
        description="The group a join enters, one of the configured groups (else "
        "unknown_group). Absent or null: the user's previous group, else default_group. "
        "Not used by a leave.")
    ts: Timestamp = Field(description=_EVENT_TS)


class DeadLetter(Wire):
    """A rejected input record (topic ``deadletter``); it changed no state."""

    source_topic: str = Field(description="The input topic the record was read from.")
    raw: str | None = Field(
        default=None, description="Null unless the worker runs with deadletter_include_raw="
        "true (operator-facing and sensitive: the reported values themselves): then the "
        "record's value, its first 256 bytes as text, invalid UTF-8 escaped as \\xNN; empty "
        "for a null value. Without it, partition and offset locate the record on source_topic.")
    reason: str = Field(description="Why it was rejected: one fixed label (REJECT_REASONS).")
    ts: float = Field(description="When the worker rejected it: seconds since the Unix epoch.")
    partition: int | None = Field(
        default=None, ge=0, description="The source record's partition on source_topic (to "
        "fetch it: partition and offset); null in records older than this field.")
    offset: int | None = Field(
        default=None, ge=0, description="The source record's offset in that partition; null "
        "in records older than this field.")
    detail: str | None = Field(
        default=None, description="What failed, for an operator, never the record's values: "
        "the field (invalid_schema: 'field value: ...'), the byte or column (malformed_json), "
        "the expected partition (wrong_partition: 'expected partition 3 of 8'). Null when the "
        "reason says it all, and in records older than this field.")


class Partial(Wire):
    """One input partition's aggregate (internal topic). sum_units: exact sum in grid units.

    group_units: per group, the sum of its present members' normalised histograms
    (core.learning.user_share units) -- the statistic the learning rounds add noise to.
    """

    partition: int = Field(ge=0)
    sum_units: int
    group_units: dict[str, list[int]] = Field(default_factory=dict)
    # per group (release_by_group): [exact sum units, number] of its present members
    # (stream_app/domain/group_totals.py); None: a worker older than the field
    group_totals: dict[str, list[int]] | None = None
    newest_ts: float = 0.0
    consumed_at: float = 0.0  # worker clock at the newest applied record's consumption (0: none)
    # tree mode (stream_app/domain/admission.py): the partition's window, its sum of admitted
    # contributions there, and the final admitted sum of the window before (None: unknown)
    window: int | None = None
    admitted_units: int | None = None
    previous_units: int | None = None


def truncate_raw(raw: bytes | None) -> str:
    """The record bytes, truncated, as text (invalid UTF-8 escaped, never decoded loosely)."""
    if raw is None:
        return ""
    return raw[:RAW_TRUNCATE_BYTES].decode("utf-8", errors="backslashreplace")


def dead_letter(
    source_topic: str, raw: bytes | None, reason: str, ts: float, partition: int | None = None,
    offset: int | None = None, detail: str | None = None, include_raw: bool = False,
) -> DeadLetter:
    """The letter of a record read from ``source_topic`` at ``partition``/``offset``; its
    bytes only with ``include_raw`` (the setting deadletter_include_raw; docs/privacy.md)."""
    kept = truncate_raw(raw) if include_raw else None
    return DeadLetter(source_topic=source_topic, raw=kept, reason=reason, ts=ts,
                      partition=partition, offset=offset, detail=detail)


def _parse(raw: bytes | None, max_bytes: int, model: type[M]) -> M:
    """Bytes -> ``model``, or Rejected with the first defect's reason and what failed."""
    if raw is not None and len(raw) > max_bytes:
        raise rejection.too_large(len(raw), max_bytes)
    if raw is None:
        raise Rejected("malformed_json", "null value")
    try:
        doc = orjson.loads(raw)  # the fast path: strict UTF-8 and standard JSON
    except orjson.JSONDecodeError:
        # orjson refuses what the classification below must tell apart (NaN/Infinity
        # literals: non_finite_value; integers beyond 64 bits); Python's json decides
        doc = _slow_json(raw)
    if not isinstance(doc, dict):  # it parsed, but it is not a record object
        raise rejection.not_an_object(doc)
    for name in ("value", "ts"):
        v = doc.get(name)
        if isinstance(v, float) and not math.isfinite(v):
            raise rejection.not_finite(name)
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise rejection.schema_error(exc) from None


def _slow_json(raw: bytes) -> object:
    try:
        # Python's json accepts NaN/Infinity literals: let them through so they are
        # classified as non_finite_value, not as malformed JSON.
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        # ValueError covers JSONDecodeError and integer literals beyond Python's digit limit
        raise rejection.malformed(exc) from None


def parse_report(raw: bytes | None, max_bytes: int) -> Report:
    return _parse(raw, max_bytes, Report)


def parse_membership(raw: bytes | None, max_bytes: int) -> Membership:
    return _parse(raw, max_bytes, Membership)


def to_bytes(model: BaseModel) -> bytes:
    return model.model_dump_json().encode()
