"""A rejected record's detail says what failed, where, and never the offending value (no broker).

Expected details are written out here; positions are counted by hand on the literal inputs.
"""

from __future__ import annotations

import json

import pytest

from stream_app.domain.inputs import check_key, read_membership, read_report
from stream_app.domain.rejection import Rejected, json_position

MAX = 4096
BIG = 1 << 20  # room for the over-long and deeply nested records
REPORT = {"user_id": "u1", "value": 1.5, "report_id": "r1", "ts": 10.0}
JOIN = {"user_id": "u1", "event": "join", "group": "g", "ts": 10.0}


def rejected(read: object, raw: bytes | None, max_bytes: int = MAX) -> Rejected:
    assert callable(read)
    with pytest.raises(Rejected) as info:
        read(raw, max_bytes)
    return info.value


@pytest.mark.parametrize(("raw", "reason", "detail"), [
    (None, "malformed_json", "null value"),
    (b'{"user_id": "u1", "value": 3', "malformed_json",
     "invalid JSON (column 29, at the end): Expecting ',' delimiter"),
    (b'{"user_id": "u1", "value": 3\r\n', "malformed_json",
     "invalid JSON (column 29, at the end): Expecting ',' delimiter"),
    (b'{"user_id" "u1"}', "malformed_json",
     "invalid JSON (column 12): Expecting ':' delimiter"),
    (b'{"user_id": "u1",\n "value" 3}', "malformed_json",
     "invalid JSON (line 2 column 10): Expecting ':' delimiter"),
    (b'{"user_id": "\xff"}', "malformed_json", "not UTF-8 (byte 13)"),
    (b"[" * 5000, "malformed_json", "JSON nested too deeply"),
    (b'{"value": 1' + b"0" * 5000 + b"}", "malformed_json", "integer literal too long"),
    (b"[1, 2]", "invalid_schema", "not a JSON object (an array)"),
    (b'"u1"', "invalid_schema", "not a JSON object (a string)"),
    (b"null", "invalid_schema", "not a JSON object (a null)"),
    (b'{"user_id": "u1", "value": NaN, "report_id": "r", "ts": 1}', "non_finite_value",
     "field value: not a finite number"),
    (b'{"user_id": "u1", "value": 1, "report_id": "r", "ts": -Infinity}', "non_finite_value",
     "field ts: not a finite number"),
], ids=lambda v: repr(v)[:40] if isinstance(v, bytes) else None)
def test_detail_of_each_reader_defect(raw: bytes | None, reason: str, detail: str) -> None:
    for read in (read_report, read_membership):
        got = rejected(read, raw, BIG)
        assert (got.reason, got.detail) == (reason, detail)


@pytest.mark.parametrize(("doc", "detail"), [
    ({**REPORT, "value": "7.25"}, "field value: Input should be a valid number"),
    ({**REPORT, "value": True}, "field value: Input should be a valid number"),
    ({**REPORT, "ts": -3.5}, "field ts: Input should be greater than or equal to 0"),
    ({**REPORT, "user_id": "secret-" * 30},
     "field user_id: String should have at most 128 characters"),
    ({k: v for k, v in REPORT.items() if k != "report_id"}, "field report_id: Field required"),
    ({"user_id": "u1", "ts": -1.0}, "field value: Field required (and 2 more)"),
])
def test_a_report_schema_error_names_the_first_failing_field(doc: dict[str, object],
                                                             detail: str) -> None:
    got = rejected(read_report, json.dumps(doc).encode())
    assert (got.reason, got.detail) == ("invalid_schema", detail)


@pytest.mark.parametrize(("doc", "detail"), [
    ({**JOIN, "event": "jump"}, "field event: Input should be 'join' or 'leave'"),
    ({**JOIN, "group": 42}, "field group: Input should be a valid string"),
])
def test_a_membership_schema_error_names_the_failing_field(doc: dict[str, object],
                                                           detail: str) -> None:
    got = rejected(read_membership, json.dumps(doc).encode())
    assert (got.reason, got.detail) == ("invalid_schema", detail)


def test_details_never_quote_the_offending_values() -> None:
    values = ["7.25", "secret-secret", "jump-9182", "'1e3'"]
    docs = [{**REPORT, "value": values[0]}, {**REPORT, "user_id": values[1] * 20},
            {**JOIN, "event": values[2]}, {**JOIN, "ts": values[3]},
            {**REPORT, "report_id": [values[1]]}]
    for doc in docs:
        for read in (read_report, read_membership):
            got = rejected(read, json.dumps(doc).encode())
            assert got.detail is not None
            assert not any(v in got.detail for v in values), got.detail


def test_payload_too_large_says_the_size_and_the_limit() -> None:
    for read in (read_report, read_membership):
        got = rejected(read, b" " * 4097, 4096)
        assert (got.reason, got.detail) == (
            "payload_too_large", "record of 4097 bytes, max_payload_bytes is 4096")


def test_key_mismatch_says_how_the_key_is_wrong() -> None:
    cases = {None: "record key is null (must be the user_id)",
             b"\xff": "record key is not UTF-8 (must be the user_id)",
             b"u2": "record key is not the user_id"}
    for key, detail in cases.items():
        with pytest.raises(Rejected) as info:
            check_key(key, "u1")
        assert (info.value.reason, info.value.detail) == ("key_mismatch", detail)


def test_a_rejection_without_detail_and_an_unknown_reason() -> None:
    assert Rejected("out_of_domain").detail is None
    assert Rejected("not_present", "user never joined").detail == "user never joined"
    with pytest.raises(ValueError):
        Rejected("value was 3.5", "detail")


@pytest.mark.parametrize(("text", "where"), [
    ('{"a": 1', "column 8, at the end"),
    ('{"a": 1\n', "column 8, at the end"),
    ('{"a": 1 \t\r\n  \n', "column 8, at the end"),
    ('{"a" 1}', "column 6"),
    ('{"a": 1,\n"b" 2}', "line 2 column 5"),
    ('{"a": 1,\n"b": 2', "line 2 column 7, at the end"),
    ("", "column 1, at the end"),
])
def test_json_position(text: str, where: str) -> None:
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads(text)
    assert json_position(info.value) == where
