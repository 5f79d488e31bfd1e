"""Wire records (JSON) and the classification of raw input bytes.

Only ``DeadLetter.raw`` ever carries input bytes (truncated); reasons are fixed labels.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from stream_app.metrics import REJECT_REASONS

RAW_TRUNCATE_BYTES = 256

Identifier = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Timestamp = Annotated[float, Field(strict=True, ge=0)]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


M = TypeVar("M", bound=_Wire)


class Report(_Wire):
    user_id: Identifier
    value: Annotated[float, Field(strict=True)]
    report_id: Identifier
    ts: Timestamp


class Membership(_Wire):
    user_id: Identifier
    event: Literal["join", "leave"]
    group: Identifier | None = None
    ts: Timestamp


class Release(_Wire):
    seq: int = Field(ge=1)
    ts: float
    noisy_sum: float
    theta: float = Field(ge=0)
    epsilon: float = Field(gt=0)
    epsilon_spent: float = Field(ge=0)
    epsilon_remaining: float
    pairs: list[str]
    rule: str
    binding_pair: str | None = None
    binding_group: str | None = None
    priors_seq: int = Field(default=0, ge=0)  # the learning round theta was calibrated on
    charge: float = Field(default=0.0, ge=0)  # epsilon this release spent
    window: int | None = None  # privacy window floor(ts / budget_window_seconds); None: none


class PriorsRecord(_Wire):
    """One group's law in one learning round (topic ``priors``; seq 0 = the settings' laws)."""

    seq: int = Field(ge=1)
    ts: float
    group: str
    support: list[float]
    probs: list[float]
    epsilon_learn: float = Field(gt=0)
    epsilon_spent: float = Field(ge=0)  # the accountant after this round's charge
    radius: float = Field(default=0.0, ge=0, le=2)  # L1 radius of the true law around probs
    status: Literal["learned", "low_mass", "void"] = "learned"  # low_mass/void: law kept
    window: int | None = None  # privacy window of the charge (see Release.window)


class DeadLetter(_Wire):
    source_topic: str
    raw: str
    reason: str
    ts: float


class Partial(_Wire):
    """One input partition's aggregate (internal topic). sum_units: exact sum in grid units.

    group_units: per group, the sum of its present members' normalised histograms
    (core.learning.user_share units) -- the statistic the learning rounds add noise to.
    """

    partition: int = Field(ge=0)
    sum_units: int
    group_units: dict[str, list[int]] = Field(default_factory=dict)
    newest_ts: float = 0.0


class Rejected(Exception):
    """A record goes to the dead-letter topic with ``reason`` (one of REJECT_REASONS)."""

    def __init__(self, reason: str) -> None:
        if reason not in REJECT_REASONS:
            raise ValueError(f"unknown dead-letter reason {reason!r}")
        super().__init__(reason)
        self.reason = reason


def truncate_raw(raw: bytes | None) -> str:
    """The record bytes, truncated, as text (invalid UTF-8 escaped, never decoded loosely)."""
    if raw is None:
        return ""
    return raw[:RAW_TRUNCATE_BYTES].decode("utf-8", errors="backslashreplace")


def dead_letter(source_topic: str, raw: bytes | None, reason: str, ts: float) -> DeadLetter:
    return DeadLetter(source_topic=source_topic, raw=truncate_raw(raw), reason=reason, ts=ts)


def _parse(raw: bytes | None, max_bytes: int, model: type[M]) -> M:
    """Bytes -> ``model``, or Rejected with the first defect's reason."""
    if raw is not None and len(raw) > max_bytes:
        raise Rejected("payload_too_large")
    if raw is None:
        raise Rejected("malformed_json")
    try:
        # Python's json accepts NaN/Infinity literals: let them through so they are
        # classified as non_finite_value, not as malformed JSON.
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError, ValueError):
        # ValueError covers JSONDecodeError and integer literals beyond Python's digit limit
        raise Rejected("malformed_json") from None
    if not isinstance(doc, dict):  # it parsed, but it is not a record object
        raise Rejected("invalid_schema")
    for name in ("value", "ts"):
        v = doc.get(name)
        if isinstance(v, float) and not math.isfinite(v):
            raise Rejected("non_finite_value")
    try:
        return model.model_validate(doc)
    except ValidationError:
        raise Rejected("invalid_schema") from None


def parse_report(raw: bytes | None, max_bytes: int) -> Report:
    return _parse(raw, max_bytes, Report)


def parse_membership(raw: bytes | None, max_bytes: int) -> Membership:
    return _parse(raw, max_bytes, Membership)


def check_key(key: bytes | None, user_id: str) -> None:
    """The record key must be the user_id (it decides the partition, hence the state owner)."""
    if key is None:
        raise Rejected("key_mismatch")
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("key_mismatch") from None
    if text != user_id:
        raise Rejected("key_mismatch")


def to_bytes(model: BaseModel) -> bytes:
    return model.model_dump_json().encode()
