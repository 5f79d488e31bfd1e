"""Classification of raw input bytes into records or dead-letter reasons (no broker)."""

from __future__ import annotations

import json

import pytest

from stream_app.domain.inputs import check_key
from stream_app.domain.models import (
    RAW_TRUNCATE_BYTES,
    DeadLetter,
    dead_letter,
    parse_membership,
    parse_report,
    to_bytes,
)
from stream_app.domain.rejection import REJECT_REASONS, Rejected


def reason(fn, raw: bytes | None) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(Rejected) as info:
        fn(raw, 4096)
    return info.value.reason


GOOD = {"user_id": "u1", "value": 1.5, "report_id": "r1", "ts": 10.0}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"{not json", "malformed_json"),
        (b"\xff\xfe", "malformed_json"),
        (b"[1, 2]", "invalid_schema"),
        (None, "malformed_json"),
        (b'{"user_id": "u1", "value": NaN, "report_id": "r", "ts": 1}', "non_finite_value"),
        (b'{"user_id": "u1", "value": Infinity, "report_id": "r", "ts": 1}', "non_finite_value"),
        (b'{"user_id": "u1", "value": 1, "report_id": "r", "ts": -Infinity}', "non_finite_value"),
        (json.dumps({"user_id": "u1", "value": 1.0, "ts": 1}).encode(), "invalid_schema"),
        (json.dumps({**GOOD, "value": "1.0"}).encode(), "invalid_schema"),
        (json.dumps({**GOOD, "value": True}).encode(), "invalid_schema"),
        (json.dumps({**GOOD, "user_id": ""}).encode(), "invalid_schema"),
        (json.dumps({**GOOD, "report_id": "x" * 200}).encode(), "invalid_schema"),
        (b" " * 5000, "payload_too_large"),
    ],
)
def test_report_rejections(raw: bytes | None, expected: str) -> None:
    assert reason(parse_report, raw) == expected


def test_report_accepts_ints_and_extra_fields() -> None:
    r = parse_report(json.dumps({**GOOD, "value": 2, "extra": 1}).encode(), 4096)
    assert r.value == 2.0 and r.user_id == "u1"


def test_membership() -> None:
    m = parse_membership(b'{"user_id": "u", "event": "join", "group": "g", "ts": 1}', 4096)
    assert (m.event, m.group) == ("join", "g")
    assert parse_membership(b'{"user_id": "u", "event": "leave", "ts": 1}', 4096).group is None
    jump = b'{"user_id": "u", "event": "jump", "ts": 1}'
    assert reason(parse_membership, jump) == "invalid_schema"
    assert reason(parse_membership, b'{"user_id": "u", "event": "join"}') == "invalid_schema"


def test_key_check() -> None:
    check_key(b"u1", "u1")
    for key in (None, b"u2", b"\xff"):
        with pytest.raises(Rejected) as info:
            check_key(key, "u1")
        assert info.value.reason == "key_mismatch"


def test_dead_letter_keeps_no_value_unless_asked() -> None:
    raw = b'{"value": 123456789}'
    dl = dead_letter("reports", raw, "out_of_domain", 1.0, partition=0, offset=3)
    assert dl.raw is None and b"123456789" not in to_bytes(dl)
    assert json.loads(to_bytes(dl))["raw"] is None


def test_dead_letter_truncates_raw_and_keeps_reason_a_label() -> None:
    raw = b'{"value": 123456789}' + b"x" * 1000
    dl = dead_letter("reports", raw, "out_of_domain", 1.0, include_raw=True)
    assert dl.raw is not None and len(dl.raw) == RAW_TRUNCATE_BYTES
    assert dl.raw.startswith('{"value": 123456789}')
    assert dl.reason == "out_of_domain" and "123456789" not in dl.reason
    assert dead_letter("reports", b"\xff", "malformed_json", 1.0, include_raw=True).raw == "\\xff"
    assert dead_letter("reports", None, "malformed_json", 1.0, include_raw=True).raw == ""
    assert (dl.partition, dl.offset, dl.detail) == (None, None, None)


def test_dead_letter_names_where_the_record_was_and_what_failed() -> None:
    dl = dead_letter("reports", b'{"user_id": "u1"}', "wrong_partition", 2.0, partition=5,
                     offset=1234, detail="expected partition 3 of 8", include_raw=True)
    assert json.loads(to_bytes(dl)) == {
        "source_topic": "reports", "raw": '{"user_id": "u1"}', "reason": "wrong_partition",
        "ts": 2.0, "partition": 5, "offset": 1234, "detail": "expected partition 3 of 8"}
    older = DeadLetter.model_validate_json(
        b'{"source_topic": "membership", "raw": "", "reason": "malformed_json", "ts": 1.0}')
    assert (older.partition, older.offset, older.detail) == (None, None, None)
    for bad in ({"partition": -1}, {"offset": -1}, {"offset": 1.5}):
        with pytest.raises(ValueError):
            DeadLetter.model_validate({**json.loads(to_bytes(dl)), **bad})
    with pytest.raises(ValueError):
        Rejected("value was 3.5")
    assert set(REJECT_REASONS) >= {"duplicate_report", "key_mismatch"}


ODD_RECORDS = [
    b'{"user_id":"a","value":NaN,"report_id":"r","ts":1}',
    b'{"user_id":"a","value":1e400,"report_id":"r","ts":1}',
    b'{"user_id":"a","value":1,"report_id":"r","ts":Infinity}',
    b'{"user_id":"a","value":1,"report_id":"r","ts":1,"user_id":"b"}',
    b'{"user_id":"\\ud800","value":1,"report_id":"r","ts":1}',
    b'\xef\xbb\xbf{"user_id":"a","value":1,"report_id":"r","ts":1}',
    b'{"user_id":"a","value":123456789012345678901234567890,"report_id":"r","ts":1}',
    b' {"user_id":"a","value":1,"report_id":"r","ts":1} ',
    b'{"user_id":"a","value":1.0,"report_id":"r","ts":1}\x00',
    b'{"user_id":"a","value":true,"report_id":"r","ts":1}',
    b'{"user_id":"\xff","value":1,"report_id":"r","ts":1}',
    b"[1]", b'"x"', b"", b"{" * 5000,
]


def _stdlib_only(raw: bytes) -> object:
    """What parse_report gave before its orjson fast path (Python's json for every record)."""
    import math

    from stream_app.domain.models import Report, _slow_json

    try:
        doc = _slow_json(raw)
    except Rejected as rej:
        return rej.reason
    if not isinstance(doc, dict):
        return "invalid_schema"
    if any(isinstance(doc.get(n), float) and not math.isfinite(doc[n]) for n in ("value", "ts")):
        return "non_finite_value"
    try:
        return Report.model_validate(doc)
    except ValueError:
        return "invalid_schema"


@pytest.mark.parametrize("raw", ODD_RECORDS)
def test_orjson_fast_path_classifies_like_python_json(raw: bytes) -> None:
    try:
        got: object = parse_report(raw, 1 << 20)
    except Rejected as rej:
        got = rej.reason
    assert got == _stdlib_only(raw)
