"""Why an input record is dead-lettered: a fixed reason label and a short detail for operators.

Details name what failed (a field, a byte position, the expected partition), never the
offending value: they are built from field names, positions and the decoders' fixed messages.
They are built only when a record is rejected, off the accepted records' path.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from pufferfish_core.errors import PufferfishError

MESSAGE_MAX = 120  # a decoder message is short; the bound only keeps a letter small

_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number",
               bool: "boolean", type(None): "null"}


# joins and leaves share one label: separate counters would give the exact population
EVENT_KINDS = ("report", "membership")

REJECT_REASONS = (
    "malformed_json",
    "invalid_schema",
    "non_finite_value",
    "out_of_domain",
    "not_present",
    "unknown_user",
    "already_present",
    "duplicate_report",
    "key_mismatch",
    "payload_too_large",
    "unknown_group",
    "wrong_partition",  # partition != murmur2(key) mod N: the producer's partitioner (design.md)
)

# records neither applied nor refused: a replay of a record the user's state already reflects
# (its input offset), a report produced before its user's leave that arrived after it
IGNORE_REASONS = ("replayed", "late_after_leave")


class Rejected(PufferfishError):
    """A record goes to the dead-letter topic with ``reason`` (one of REJECT_REASONS) and an
    optional ``detail`` (what failed, never the record's values)."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        if reason not in REJECT_REASONS:
            raise ValueError(f"unknown dead-letter reason {reason!r}")
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def json_position(exc: json.JSONDecodeError) -> str:
    """Where the decoder failed: ``column C`` (``line L column C`` past the first line), and
    ``at the end`` when only whitespace follows. A failure inside trailing whitespace (a line
    terminator) is put just after the last character: the newline itself is not the defect."""
    text = exc.doc
    end = len(text.rstrip(" \t\r\n"))  # JSON's whitespace
    pos = min(exc.pos, end)
    line = text.count("\n", 0, pos) + 1
    column = pos - text.rfind("\n", 0, pos)
    where = f"column {column}" if line == 1 else f"line {line} column {column}"
    return f"{where}, at the end" if exc.pos >= end else where


def malformed(exc: BaseException) -> Rejected:
    """malformed_json from Python's json failing on the record's bytes or text."""
    if isinstance(exc, UnicodeDecodeError):
        return Rejected("malformed_json", f"not UTF-8 (byte {exc.start})")
    if isinstance(exc, RecursionError):
        return Rejected("malformed_json", "JSON nested too deeply")
    if isinstance(exc, json.JSONDecodeError):
        return Rejected("malformed_json",
                        f"invalid JSON ({json_position(exc)}): {exc.msg[:MESSAGE_MAX]}")
    # int() refusing an over-long integer literal (its message counts the digits)
    return Rejected("malformed_json", "integer literal too long")


def not_an_object(doc: object) -> Rejected:
    kind = _JSON_TYPES.get(type(doc), "value")
    article = "an" if kind in ("array", "object") else "a"
    return Rejected("invalid_schema", f"not a JSON object ({article} {kind})")


def not_finite(field: str) -> Rejected:
    return Rejected("non_finite_value", f"field {field}: not a finite number")


def too_large(size: int, max_bytes: int) -> Rejected:
    return Rejected("payload_too_large",
                    f"record of {size} bytes, max_payload_bytes is {max_bytes}")


def schema_error(exc: ValidationError) -> Rejected:
    """invalid_schema naming the first failing field (pydantic's loc) and pydantic's message,
    whose templates state the constraint, not the input."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    first = errors[0]
    field = ".".join(str(p) for p in first.get("loc", ())) or "record"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return Rejected("invalid_schema", f"field {field}: {first['msg'][:MESSAGE_MAX]}{more}")


def wrong_partition(expected: int, partitions: int) -> Rejected:
    return Rejected("wrong_partition", f"expected partition {expected} of {partitions}")
