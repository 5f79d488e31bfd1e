"""The input path's parsers (models.read_report / read_membership) decide every input exactly
as the pydantic models do (models.parse_report / parse_membership): same acceptance, same
dead-letter reason and detail, same field values and types. The oracle is the models themselves."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_app.domain.inputs import MembershipIn, ReportIn, read_membership, read_report
from stream_app.domain.models import parse_membership, parse_report
from stream_app.domain.rejection import Rejected

MAX_BYTES = 4096
REPORT = {"user_id": "u1", "value": 1.5, "report_id": "r1", "ts": 10.0}
JOIN = {"user_id": "u1", "event": "join", "group": "g", "ts": 10.0}


def outcome(parse: Any, raw: bytes | None) -> tuple[Any, ...]:
    """("rejected", reason, detail) or ("ok", (type, value) of each field)."""
    try:
        rec = parse(raw, MAX_BYTES)
    except Rejected as rej:
        return ("rejected", rej.reason, rej.detail)
    fields = rec._fields if isinstance(rec, tuple) else tuple(type(rec).model_fields)
    return ("ok", tuple((f, type(getattr(rec, f)), getattr(rec, f)) for f in fields))


def same(raw: bytes | None) -> None:
    assert outcome(read_report, raw) == outcome(parse_report, raw), raw
    assert outcome(read_membership, raw) == outcome(parse_membership, raw), raw


EDGE_REPORTS: list[dict[str, Any]] = [
    REPORT,
    {**REPORT, "extra": [1, 2]},
    {**REPORT, "value": 1},  # an int value (strict float, but JSON ints are numbers)
    {**REPORT, "value": True},
    {**REPORT, "value": -0.0},
    {**REPORT, "value": 1e308},
    {**REPORT, "value": "1.5"},
    {**REPORT, "value": None},
    {**REPORT, "ts": 0.0},
    {**REPORT, "ts": -0.0},
    {**REPORT, "ts": -1.0},
    {**REPORT, "ts": 5},
    {**REPORT, "ts": False},
    {**REPORT, "user_id": ""},
    {**REPORT, "user_id": "x" * 128},
    {**REPORT, "user_id": "x" * 129},
    {**REPORT, "user_id": "é" * 128},  # 128 characters, 256 bytes
    {**REPORT, "user_id": "é" * 129},
    {**REPORT, "user_id": "\U0001f600" * 128},
    {**REPORT, "user_id": 7},
    {**REPORT, "report_id": ""},
    {**REPORT, "report_id": "r" * 129},
    {**REPORT, "report_id": ["r"]},
    {k: v for k, v in REPORT.items() if k != "ts"},
    {k: v for k, v in REPORT.items() if k != "report_id"},
]
EDGE_MEMBERSHIPS: list[dict[str, Any]] = [
    JOIN,
    {**JOIN, "event": "leave"},
    {**JOIN, "event": "Join"},
    {**JOIN, "event": ["join"]},
    {**JOIN, "group": None},
    {k: v for k, v in JOIN.items() if k != "group"},
    {**JOIN, "group": ""},
    {**JOIN, "group": "g" * 128},
    {**JOIN, "group": "g" * 129},
    {**JOIN, "group": 3},
    {**JOIN, "ts": 3},
    {**JOIN, "ts": -2.5},
    {**JOIN, "user_id": "ü" * 129},
]
RAW_EDGES: list[bytes | None] = [
    None, b"", b"{", b"[]", b"null", b"3", b'"s"', b"\xff", b"{}",
    b'{"user_id": "u", "value": NaN, "report_id": "r", "ts": 1.0}',
    b'{"user_id": "u", "value": 1.0, "report_id": "r", "ts": Infinity}',
    b'{"user_id": "u", "value": 1e999, "report_id": "r", "ts": 1.0}',
    b'{"user_id": "u", "value": 1.0, "report_id": "r", "ts": 1.0, "ts": -1.0}',  # last wins
    b'{"user_id": "u", "value": 123456789012345678901234567890, "report_id": "r", "ts": 1.0}',
    b'{"user_id": "\\ud800", "value": 1.0, "report_id": "r", "ts": 1.0}',  # a lone surrogate
    json.dumps({**REPORT, "pad": "x" * MAX_BYTES}).encode(),  # payload_too_large
    json.dumps({**REPORT, "pad": "x" * (MAX_BYTES - 100)}).encode(),
]


@pytest.mark.parametrize("doc", EDGE_REPORTS + EDGE_MEMBERSHIPS)
def test_edge_documents(doc: dict[str, Any]) -> None:
    same(json.dumps(doc).encode())


@pytest.mark.parametrize("raw", RAW_EDGES)
def test_edge_bytes(raw: bytes | None) -> None:
    same(raw)


def test_the_edges_cover_both_outcomes() -> None:
    """The corpus above is worth something only if it has accepted and rejected records."""
    got = {outcome(read_report, json.dumps(d).encode())[0] for d in EDGE_REPORTS}
    assert got == {"ok", "rejected"}
    got = {outcome(read_membership, json.dumps(d).encode())[0] for d in EDGE_MEMBERSHIPS}
    assert got == {"ok", "rejected"}


def test_a_valid_record_comes_back_as_its_tuple() -> None:
    assert read_report(json.dumps(REPORT).encode(), MAX_BYTES) == ReportIn("u1", 1.5, "r1", 10.0)
    assert read_membership(json.dumps(JOIN).encode(), MAX_BYTES) == MembershipIn(
        "u1", "join", "g", 10.0)
    with pytest.raises(Rejected) as info:
        read_report(json.dumps({**REPORT, "user_id": "x" * 129}).encode(), MAX_BYTES)
    assert info.value.reason == "invalid_schema"


_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=140),
    st.sampled_from(["join", "leave", "", "x" * 128, "x" * 129]),
    st.lists(st.integers(), max_size=2),
)
_docs = st.dictionaries(
    st.sampled_from(["user_id", "value", "report_id", "ts", "event", "group", "other"]),
    _values, max_size=7,
)


@settings(max_examples=600, deadline=None)
@given(doc=_docs)
def test_generated_documents(doc: dict[str, Any]) -> None:
    same(json.dumps(doc).encode())


@settings(max_examples=300, deadline=None)
@given(uid=st.text(min_size=0, max_size=140), ts=st.floats(allow_nan=False, width=64))
def test_generated_ids_and_times(uid: str, ts: float) -> None:
    same(json.dumps({**REPORT, "user_id": uid, "ts": ts}).encode())
    same(json.dumps({**JOIN, "group": uid, "ts": ts}).encode())
