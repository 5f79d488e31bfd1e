"""The input path's form of reports and joins/leaves: the same fields as plain tuples.

The worker only reads a record's fields: a pydantic model per record costs 1.3 us
(parse_report), a tuple 0.65 us (read_report). The read_* functions accept by hand what is
plainly valid (the exact JSON types the models accept as they are, within their bounds) and
leave everything else to parse_*, which decides: the outcome is parse_*'s for every input
(tests/stream_app/domain/test_models_fast.py).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import orjson

from stream_app.domain.models import parse_membership, parse_report
from stream_app.domain.rejection import Rejected


class ReportIn(NamedTuple):
    """A valid report (the fields of ``Report``)."""

    user_id: str
    value: float
    report_id: str
    ts: float


class MembershipIn(NamedTuple):
    """A valid join/leave (the fields of ``Membership``)."""

    user_id: str
    event: str
    group: str | None
    ts: float


_INF = math.inf
ID_MAX = 128  # Identifier's max_length (also common_report's inline check)
# builds a NamedTuple without its Python-level __new__ (hot paths: one per record or user)
tuple_new = tuple.__new__


def _fields(raw: bytes | None, max_bytes: int, names: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The named fields of the record's JSON object on the fast path (None for an absent one),
    else None: not a JSON object within ``max_bytes`` (parse_* then decides)."""
    if raw is None or len(raw) > max_bytes:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return tuple(map(doc.get, names)) if type(doc) is dict else None


def read_report(raw: bytes | None, max_bytes: int) -> ReportIn:
    """``parse_report`` as a ``ReportIn``: the same acceptance and reasons."""
    got = _fields(raw, max_bytes, ReportIn._fields)
    if got is not None:
        uid, value, rid, ts = got
        # exact JSON types (str, float) within the model's bounds; NaN fails every comparison
        if type(uid) is str and 0 < len(uid) <= ID_MAX and type(rid) is str \
                and 0 < len(rid) <= ID_MAX and type(value) is float and -_INF < value < _INF \
                and type(ts) is float and 0.0 <= ts < _INF:
            return tuple_new(ReportIn, got)
    r = parse_report(raw, max_bytes)
    return ReportIn(r.user_id, r.value, r.report_id, r.ts)


def read_membership(raw: bytes | None, max_bytes: int) -> MembershipIn:
    """``parse_membership`` as a ``MembershipIn``: the same acceptance and reasons."""
    got = _fields(raw, max_bytes, MembershipIn._fields)
    if got is not None:
        uid, event, group, ts = got
        if type(uid) is str and 0 < len(uid) <= ID_MAX and type(event) is str \
                and (event == "join" or event == "leave") \
                and (group is None or (type(group) is str and 0 < len(group) <= ID_MAX)) \
                and type(ts) is float and 0.0 <= ts < _INF:
            return tuple_new(MembershipIn, got)
    m = parse_membership(raw, max_bytes)
    return MembershipIn(m.user_id, m.event, m.group, m.ts)


def check_key(key: bytes | None, user_id: str) -> bytes:
    """The record key must be the user_id (it decides the partition, hence the state owner);
    returns it."""
    if key is None:
        raise Rejected("key_mismatch", "record key is null (must be the user_id)")
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("key_mismatch", "record key is not UTF-8 (must be the user_id)") from None
    if text != user_id:
        raise Rejected("key_mismatch", "record key is not the user_id")
    return key
