"""Input lines of ``pufferfish send``, tail's lines, and argument errors (no broker needed)."""

from __future__ import annotations

import json

import pytest

from stream_app.domain.models import Membership, Report
from stream_app.settings import Settings
from stream_app.tools import send, tail
from stream_app.tools.lines import MEMBERSHIP, REPORTS, LineError, parse_line

REPORT = {"user_id": "u1", "value": 1, "report_id": "r1", "ts": 10}
JOIN = {"user_id": "u2", "event": "join", "group": "g", "ts": 10.5}
MAX = 4096


def _line(doc: object) -> bytes:
    return json.dumps(doc).encode() + b"\n"


def test_a_report_line_becomes_a_keyed_report_record() -> None:
    record = parse_line(_line(REPORT), MAX)
    assert record is not None and record.kind == REPORTS and record.key == b"u1"
    assert Report.model_validate_json(record.value) == Report.model_validate(REPORT)


def test_a_membership_line_becomes_a_keyed_membership_record() -> None:
    record = parse_line(_line({**JOIN, "extra": [1]}), MAX)
    assert record is not None and record.kind == MEMBERSHIP and record.key == b"u2"
    assert json.loads(record.value) == JOIN  # validated form: the extra field is not sent
    leave = parse_line(_line({"user_id": "u2", "event": "leave", "ts": 11}), MAX)
    assert leave is not None and b"group" not in leave.value
    assert Membership.model_validate_json(leave.value).event == "leave"


@pytest.mark.parametrize("named", ["membership", "membership-prod"])
def test_an_explicit_topic_field_names_the_kind_and_is_not_sent(named: str) -> None:
    topics = {REPORTS: "reports-prod", MEMBERSHIP: "membership-prod"}
    record = parse_line(_line({**JOIN, "topic": named}), MAX, topics)
    assert record is not None and record.kind == MEMBERSHIP and b"topic" not in record.value


@pytest.mark.parametrize("raw", [b"", b"\n", b"   \r\n"])
def test_blank_lines_are_ignored(raw: bytes) -> None:
    assert parse_line(raw, MAX) is None


@pytest.mark.parametrize(("raw", "reason", "says"), [
    (b"{bad json\n", "malformed_json", "invalid JSON (column 2)"),
    (b"\xff\xfe\n", "malformed_json", "not UTF-8"),
    (b"[1, 2]\n", "invalid_schema", "not a JSON object (a list)"),
    (_line({**REPORT, "value": "x"}), "invalid_schema", "report: value:"),
    (_line({**REPORT, "value": True}), "invalid_schema", "report: value:"),
    (_line({k: v for k, v in REPORT.items() if k != "ts"}), "invalid_schema", "report: ts:"),
    (_line({**REPORT, "user_id": ""}), "invalid_schema", "report: user_id:"),
    (_line({**REPORT, "ts": -1}), "invalid_schema", "report: ts:"),
    (_line({**JOIN, "event": "jump"}), "invalid_schema", "membership event: event:"),
    (_line({"user_id": "u"}), "invalid_schema", "neither a report"),
    (_line({**REPORT, "event": "join"}), "invalid_schema", "both a report"),
    (_line({**REPORT, "topic": "releases"}), "invalid_schema", "topic: must be one of"),
    (b'{"user_id": "u", "value": NaN, "report_id": "r", "ts": 1}', "non_finite_value", "NaN"),
    (b'{"user_id": "u", "value": 1, "report_id": "r", "ts": Infinity}', "non_finite_value",
     "Infinity"),
    (b'{"user_id": "u", "value": 1' + b"0" * 5000 + b', "report_id": "r", "ts": 1}',
     "malformed_json", "invalid JSON"),
])
def test_bad_lines_say_why(raw: bytes, reason: str, says: str) -> None:
    with pytest.raises(LineError) as caught:
        parse_line(raw, MAX)
    assert caught.value.reason == reason
    assert says in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("end", [b"", b"\n", b"\r\n"])
def test_a_brace_missing_at_the_end_of_a_line_is_placed_at_the_end(end: bytes) -> None:
    # 28 characters: the decoder wanted "," or "}" at column 29, not on the next line
    with pytest.raises(LineError) as caught:
        parse_line(b'{"user_id": "u1", "value": 3' + end, MAX)
    assert caught.value.reason == "malformed_json"
    assert str(caught.value) == (
        "invalid JSON (column 29, at the end): Expecting ',' delimiter")


def test_a_record_larger_than_max_payload_bytes_is_skipped() -> None:
    with pytest.raises(LineError) as caught:
        parse_line(_line({**JOIN, "group": "g" * 100}), 64)
    assert caught.value.reason == "payload_too_large" and "max_payload_bytes is 64" in str(
        caught.value)


def test_tail_lines() -> None:
    release = {"seq": 3, "ts": 1.0, "noisy_sum": 4.25, "theta": 2.0, "epsilon": 1.0,
               "epsilon_spent": 3.0, "epsilon_remaining": 97.0, "pairs": ["value_presence"],
               "rule": "bound", "charge": 1.0, "window": 7, "tick": 1800000123}
    raw = json.dumps(release).encode()
    assert tail.render("releases", raw, as_json=False) == (
        "release seq=3 tick=1800000123 theta=2 noisy_sum=4.25 charge=1 epsilon_spent=3/100 "
        "priors_seq=0 window=7")
    learned = json.dumps({**release, "tick": None, "learning_rounds": 4,
                          "failure_probability": 8e-6}).encode()
    assert tail.render("releases", learned, as_json=False) == (
        "release seq=3 tick=- theta=2 noisy_sum=4.25 charge=1 epsilon_spent=3/100 "
        "priors_seq=0 window=7 learning_rounds=4 failure_probability=8e-06")
    assert json.loads(tail.render("releases", raw, as_json=True) or "") == release
    tree = json.dumps({**release, "mechanism": "tree", "window_tick": 5, "nodes": ["base", "0.4"],
                       "arity": 2, "max_changes_per_window": 4, "charge": 0.0}).encode()
    assert tail.render("releases", tree, as_json=False) == (
        "release seq=3 tick=1800000123 theta=2 noisy_sum=4.25 charge=0 epsilon_spent=3/100 "
        "priors_seq=0 window=7 mechanism=tree window_tick=5 nodes=base,0.4 arity=2 "
        "max_changes_per_window=4")
    barred = json.dumps({**release, "noise_sd": 2.8284, "ci95_half_width": 5.99146}).encode()
    assert tail.render("releases", barred, as_json=False) == (
        "release seq=3 tick=1800000123 theta=2 noisy_sum=4.25 ± 5.991 noise_sd=2.828 charge=1 "
        "epsilon_spent=3/100 priors_seq=0 window=7")
    group = {"noisy_sum": 1.5, "theta": 2.0, "noise_sd": 2.8284, "ci95_half_width": 5.99146,
             "noisy_count": 2.75, "count_theta": 2.0, "count_noise_sd": 2.8284,
             "count_ci95_half_width": 5.99146}
    grouped = json.dumps({**release, "noise_sd": 4.0, "ci95_half_width": 8.1,
                          "groups": {"a": group, "b": {**group, "noisy_sum": 2.75}}}).encode()
    assert tail.render("releases", grouped, as_json=False) == (
        "release seq=3 tick=1800000123 theta=2 noisy_sum=4.25 ± 8.1 noise_sd=4 charge=1 "
        "epsilon_spent=3/100 priors_seq=0 window=7\n"
        "  group=a noisy_sum=1.5 ± 5.991 noise_sd=2.828 noisy_count=2.75 ± 5.991 "
        "count_noise_sd=2.828\n"
        "  group=b noisy_sum=2.75 ± 5.991 noise_sd=2.828 noisy_count=2.75 ± 5.991 "
        "count_noise_sd=2.828")
    priors = {"seq": 2, "ts": 1.0, "group": "g1", "support": [0, 1], "probs": [0.25, 0.75],
              "epsilon_learn": 0.1, "epsilon_spent": 0.2, "radius": 0.5, "status": "learned",
              "tick": 77}
    assert tail.render("priors", json.dumps(priors).encode(), as_json=False) == (
        "priors seq=2 tick=77 group=g1 status=learned radius=0.5 epsilon_learn=0.1 "
        "epsilon_spent=0.2 law={0:0.250, 1:0.750}")
    for bad in (b"not json", b"[1]", None):
        assert tail.render("releases", bad, as_json=True) is None
        assert tail.render("releases", bad, as_json=False) is None
    assert tail.render("releases", b'{"seq": 0}', as_json=False) is None  # not a release


def test_tail_deadletter_lines() -> None:
    letter = {"source_topic": "reports", "raw": '{"user_id": "u7", "value": 2}',
              "reason": "wrong_partition", "ts": 5.0, "partition": 1, "offset": 42,
              "detail": "expected partition 3 of 8"}
    raw = json.dumps(letter).encode()
    line = tail.render("deadletter", raw, as_json=False)
    assert line == ('deadletter reason=wrong_partition source_topic=reports partition=1 '
                    'offset=42 detail="expected partition 3 of 8"')
    assert json.loads(tail.render("deadletter", raw, as_json=True) or "") == letter
    older = {"source_topic": "membership", "raw": "{", "reason": "malformed_json", "ts": 1.0}
    assert tail.render("deadletter", json.dumps(older).encode(), as_json=False) == (
        "deadletter reason=malformed_json source_topic=membership partition=- offset=-")
    assert tail.render("deadletter", b'{"reason": "x"}', as_json=False) is None


@pytest.mark.usefixtures("clean_env")
def test_tail_topics_deadletter_is_chosen_by_kind_or_configured_name() -> None:
    s = Settings(topic_deadletter="dlq-prod")
    assert tail.chosen_topics(s, "deadletter") == {"dlq-prod": "deadletter"}
    assert tail.chosen_topics(s, "releases, dlq-prod") == {
        "releases": "releases", "dlq-prod": "deadletter"}


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(("main", "argv", "says"), [
    (send.main, ["/no/such/file.jsonl"], "pufferfish: error: input: cannot read"),
    (send.main, ["--timeout", "0"], "pufferfish: error: arguments: argument --timeout"),
    (send.main, ["--config", "/no/such.json"], "pufferfish: error: config: no such file"),
    (tail.main, ["--topics", "releases,bogus"], "pufferfish: error: --topics: unknown topic"),
    (tail.main, ["--max", "0"], "pufferfish: error: arguments: argument --max"),
])
def test_argument_errors_are_one_line_exit_2(main: object, argv: list[str], says: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert callable(main)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(says) and err.count("\n") == 1, err
