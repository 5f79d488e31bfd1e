"""One JSONL input line of ``pufferfish send`` -> the record to produce, or why it is skipped.

A line is a report ``{"user_id", "value", "report_id", "ts"}`` or a membership event
``{"user_id", "event": "join"|"leave", "group"?, "ts"}``; the kind is told by the fields
(``event`` -> membership; ``value`` or ``report_id`` -> report). An optional ``"topic"`` field,
``"reports"`` or ``"membership"`` (or the configured topic name), names the kind explicitly and
is not sent. Lines are validated with the worker's own models (stream_app.domain.models), so a line
that passes is never dead-lettered for its form; skip reasons use the dead-letter labels
(``malformed_json``, ``invalid_schema``, ``non_finite_value``, ``payload_too_large``). Blank
lines are ignored. The value sent is the validated record's JSON; the key is ``user_id``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from pydantic import BaseModel, ValidationError

from pufferfish_core.errors import PufferfishError
from stream_app.domain.models import Membership, Report
from stream_app.domain.rejection import json_position

REPORTS, MEMBERSHIP = "reports", "membership"
MODELS: dict[str, type[BaseModel]] = {REPORTS: Report, MEMBERSHIP: Membership}


class LineError(PufferfishError, ValueError):
    """A line that is skipped: ``reason`` is a dead-letter label, the message says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Record:
    kind: str  # REPORTS or MEMBERSHIP
    key: bytes
    value: bytes


def _non_finite(name: str) -> NoReturn:
    raise LineError("non_finite_value", f"{name} is not a finite number")


def _load(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_non_finite)
    except UnicodeDecodeError:
        raise LineError("malformed_json", "not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise LineError("malformed_json", f"invalid JSON ({json_position(exc)}): {exc.msg}"
                        ) from None
    except RecursionError:
        raise LineError("malformed_json", "JSON nested too deeply") from None
    except ValueError as exc:  # LineError is re-raised; e.g. an over-long integer literal
        if isinstance(exc, LineError):
            raise
        raise LineError("malformed_json", f"invalid JSON: {str(exc)[:80]}") from None


def _kind(doc: dict[str, Any], topics: Mapping[str, str]) -> str:
    if "topic" in doc:
        named = doc["topic"]
        for kind, topic in topics.items():
            if named in (kind, topic):
                return kind
        allowed = sorted({*topics, *topics.values()})
        raise LineError("invalid_schema", f"topic: must be one of {', '.join(allowed)}")
    membership = "event" in doc
    report = "value" in doc or "report_id" in doc
    if membership and report:
        raise LineError("invalid_schema", "both a report (value, report_id) and a membership "
                        'event (event): add "topic": "reports" or "membership"')
    if not (membership or report):
        raise LineError("invalid_schema", "neither a report (value, report_id) nor a "
                        "membership event (event)")
    return MEMBERSHIP if membership else REPORTS


def _schema_message(kind: str, exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "record"
    return f"{'report' if kind == REPORTS else 'membership event'}: {where}: {err['msg']}"


def parse_line(raw: bytes, max_bytes: int,
               topics: Mapping[str, str] | None = None) -> Record | None:
    """The record for one input line (None for a blank line); LineError when it is skipped.

    ``topics`` maps each kind to its configured topic name (accepted in a ``"topic"`` field).
    """
    if not raw.strip():
        return None
    doc = _load(raw)
    if not isinstance(doc, dict):
        raise LineError("invalid_schema", f"not a JSON object (a {type(doc).__name__})")
    kind = _kind(doc, topics or {REPORTS: REPORTS, MEMBERSHIP: MEMBERSHIP})
    try:
        model = MODELS[kind].model_validate(doc)
    except ValidationError as exc:
        raise LineError("invalid_schema", _schema_message(kind, exc)) from None
    value = model.model_dump_json(exclude_none=True).encode()
    if len(value) > max_bytes:
        raise LineError("payload_too_large",
                        f"record is {len(value)} bytes, max_payload_bytes is {max_bytes}")
    user_id: str = getattr(model, "user_id")  # noqa: B009 - both models have it
    return Record(kind, user_id.encode("utf-8"), value)
