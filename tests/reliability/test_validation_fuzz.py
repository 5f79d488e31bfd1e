"""Property tests of the worker's pure input classification (no broker).

The worker's record path is: models.parse_report / parse_membership (bytes -> model or
Rejected) -> inputs.check_key -> state.apply_report / apply_membership (Rejected for
state-dependent defects). Every input must end as an accepted model/state or as Rejected with
one of the documented reasons; any other exception would crash the Faust agent.

The oracle below is written from docs/design.md (the wire format and the reason list), not
from the product code.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stream_app.domain import inputs, models
from stream_app.domain.digests import report_digest
from stream_app.domain.models import Membership, Report
from stream_app.domain.rejection import REJECT_REASONS, Rejected
from stream_app.domain.rules import EventRules
from stream_app.domain.state import apply_membership, apply_report

pytestmark = pytest.mark.timeout(180)

MAX_BYTES = 4096
DOMAIN = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
RULES = EventRules(domain=DOMAIN, grid_log2=-10, dedup_window=8, auto_join=False,
                   known_groups=frozenset({"default"}), default_group="default")

# JSON values of every type, including the ones Python's json module lets through (NaN, inf)
# and numbers that overflow a double.
_weird_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([10**308 * 10, -(10**400), 1e308, 5e-324, -0.0]),
)
_scalars = st.one_of(st.none(), st.booleans(), _weird_numbers, st.text(max_size=20))
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
_ids = st.one_of(st.text(min_size=0, max_size=140), _scalars)


def _classify(parse: Any, raw: bytes) -> str | None:
    try:
        parse(raw, MAX_BYTES)
    except Rejected as rej:
        assert rej.reason in REJECT_REASONS
        return rej.reason
    return None


@settings(max_examples=400, deadline=None)
@given(raw=st.binary(max_size=6000))
def test_arbitrary_bytes_are_accepted_or_rejected_never_raise(raw: bytes) -> None:
    for parse in (models.parse_report, models.parse_membership):
        reason = _classify(parse, raw)  # anything but Rejected propagates and fails the test
        if len(raw) > MAX_BYTES:
            assert reason == "payload_too_large"


def _expected_report_reason(doc: Any) -> set[str | None]:
    """Acceptable outcomes for a JSON document sent as a report (oracle from the design)."""
    if not isinstance(doc, dict):
        # Well-formed JSON that is not an object: it parsed, so invalid_schema.
        return {"invalid_schema"}
    for name in ("value", "ts"):
        v = doc.get(name)
        if isinstance(v, float) and not math.isfinite(v):
            return {"non_finite_value"}

    def ident(x: Any) -> bool:
        return isinstance(x, str) and 1 <= len(x) <= 128

    def number(x: Any) -> bool:
        if isinstance(x, bool) or not isinstance(x, int | float):
            return False
        try:
            return math.isfinite(float(x))  # 1e308 is a finite float: out_of_domain later
        except OverflowError:  # an int too large for a float
            return False

    ok = (ident(doc.get("user_id")) and ident(doc.get("report_id")) and number(doc.get("value"))
          and number(doc.get("ts")) and doc["ts"] >= 0)
    return {None} if ok else {"invalid_schema"}


_report_docs = st.one_of(
    _json,
    st.fixed_dictionaries({}, optional={
        "user_id": _ids, "value": _weird_numbers | _scalars, "report_id": _ids,
        "ts": _weird_numbers | _scalars, "extra": _json,
    }),
)


@settings(max_examples=500, deadline=None)
@given(doc=_report_docs)
def test_report_documents_classified_by_the_documented_reasons(doc: Any) -> None:
    try:
        raw = json.dumps(doc).encode()
    except (ValueError, OverflowError):
        assume(False)
        return
    assume(len(raw) <= MAX_BYTES)
    assert _classify(models.parse_report, raw) in _expected_report_reason(doc), raw[:300]


@settings(max_examples=300, deadline=None)
@given(doc=st.one_of(_json, st.fixed_dictionaries({}, optional={
    "user_id": _ids, "event": st.sampled_from(["join", "leave", "JOIN", "", "dance"]) | _scalars,
    "group": _ids, "ts": _weird_numbers | _scalars,
})))
def test_membership_documents_never_raise(doc: Any) -> None:
    raw = json.dumps(doc).encode()
    assume(len(raw) <= MAX_BYTES)
    reason = _classify(models.parse_membership, raw)
    if isinstance(doc, dict) and doc.get("event") not in ("join", "leave"):
        assert reason in {"invalid_schema", "non_finite_value"}


@settings(max_examples=200, deadline=None)
@given(key=st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=10).map(str.encode)),
       user=st.text(min_size=1, max_size=10))
def test_key_must_equal_user_id(key: bytes | None, user: str) -> None:
    try:
        inputs.check_key(key, user)
        accepted = True
    except Rejected as rej:
        assert rej.reason == "key_mismatch"
        accepted = False
    assert accepted == (key == user.encode())


@pytest.mark.parametrize("digits", [4301, 20000])
def test_integer_literal_beyond_python_digit_limit_is_rejected_not_raised(digits: int) -> None:
    """Python refuses int(str) beyond 4300 digits with a plain ValueError (not JSONDecodeError).

    The design allows max_payload_bytes up to 1 MiB, so such a record reaches the parser.
    """
    raw = b'{"user_id": "u", "value": ' + b"7" * digits + b', "report_id": "r", "ts": 1.0}'
    for parse in (models.parse_report, models.parse_membership):
        try:
            parse(raw, 1_048_576)
        except Rejected as rej:
            assert rej.reason in {"malformed_json", "invalid_schema", "out_of_domain"}


# ---- state-dependent rules --------------------------------------------------------------

_values = st.sampled_from(DOMAIN) | st.floats(-10, 10, allow_nan=False) | st.integers(-3, 9)


@st.composite
def _event_sequences(draw: st.DrawFn) -> list[tuple[str, Any]]:
    n = draw(st.integers(1, 40))
    out: list[tuple[str, Any]] = []
    for i in range(n):
        kind = draw(st.sampled_from(["join", "leave", "report", "report", "report"]))
        if kind == "report":
            rid = draw(st.sampled_from([f"r{j}" for j in range(12)]))
            out.append(("report", Report(user_id="u", value=float(draw(_values)),
                                         report_id=rid, ts=float(i))))
        else:
            out.append(("membership", Membership(user_id="u", event=kind, ts=float(i))))
    return out


@settings(max_examples=300, deadline=None)
@given(events=_event_sequences())
def test_user_state_follows_an_independent_model(events: list[tuple[str, Any]]) -> None:
    """Replay a random event sequence for one user against a plain-Python model of the rules."""
    state = None
    present, last_value, ids, hist = False, None, [], dict.fromkeys(DOMAIN, 0)
    for kind, ev in events:
        if kind == "membership":
            want = (None if (ev.event == "join") != present else
                    ("already_present" if ev.event == "join" else "unknown_user"))
        else:
            want = ("out_of_domain" if ev.value not in DOMAIN else
                    "not_present" if not present else
                    "duplicate_report" if ev.report_id in ids else None)
        try:
            new = (apply_membership(state, ev, 0, RULES) if kind == "membership"
                   else apply_report(state, ev, 0, RULES))
            got = None
        except Rejected as rej:
            got, new = rej.reason, state
        assert got == want, (kind, ev, got, want)
        if got is None:
            if kind == "membership":
                present = ev.event == "join"
            else:
                ids = (ids + [ev.report_id])[-RULES.dedup_window:]
                hist[ev.value] += 1
                last_value = ev.value
        state = new
    if state is not None:
        assert state.present == present
        assert list(state.counts) == [hist[v] for v in DOMAIN]
        assert list(state.recent_ids) == [report_digest(r) for r in ids]
        if last_value is not None:
            assert state.value_units == int(last_value * 1024)
            assert state.contribution_units == (int(last_value * 1024) if present else 0)


@pytest.mark.parametrize("raw", [b"[1, 2]", b"42", b'"text"', b"null"])
def test_valid_json_that_is_not_an_object_is_invalid_schema(raw: bytes) -> None:
    assert _classify(models.parse_report, raw) == "invalid_schema"


def test_join_with_unknown_or_missing_group_without_a_default_group() -> None:
    rules = EventRules(domain=DOMAIN, grid_log2=-10, dedup_window=8, auto_join=False,
                       known_groups=frozenset({"a", "b"}), default_group=None)
    for group in ("c", None):
        with pytest.raises(Rejected) as info:
            apply_membership(None, Membership(user_id="u", event="join", group=group, ts=1.0),
                             0, rules)
        assert info.value.reason == "unknown_group"
    ok = apply_membership(None, Membership(user_id="u", event="join", group="a", ts=1.0), 0, rules)
    assert ok.present and ok.group == "a"
