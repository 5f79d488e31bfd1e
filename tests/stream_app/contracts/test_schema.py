"""`pufferfish schema`: the committed contract files are what the models generate, the schemas
agree with the worker's parser, the AsyncAPI document names every topic and schema file, and
bad arguments are one line on stderr with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stream_app import cli
from stream_app.contracts import schema
from stream_app.domain.models import (
    DeadLetter,
    PriorsRecord,
    Release,
    dead_letter,
    parse_membership,
    parse_report,
    to_bytes,
)
from stream_app.domain.rejection import Rejected
from tests.stream_app.contracts.contract_files import REGENERATE, REPO, SCHEMAS, TOPICS, errors

REPORT = {"user_id": "u1", "value": 1.5, "report_id": "r1", "ts": 1700000000.5}
JOIN = {"user_id": "u1", "event": "join", "group": "g1", "ts": 1700000000.0}


def test_committed_files_are_what_the_command_writes(tmp_path: Path) -> None:
    assert cli.main(["schema", "--out", str(tmp_path)]) == 0
    fresh = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_bytes() for p in SCHEMAS.iterdir()}
    assert sorted(committed) == sorted(fresh), f"deploy/schemas has other files: {REGENERATE}"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"deploy/schemas/{', '.join(stale)} out of date: {REGENERATE}"
    assert cli.main(["schema", "--out", str(SCHEMAS), "--check"]) == 0


def test_output_is_deterministic_and_canonical() -> None:
    first, second = schema.render(), schema.render()
    assert first == second
    assert set(first) == {f"{t}.schema.json" for t in TOPICS} | {"asyncapi.json"}
    for text in first.values():
        assert text.endswith("}\n") and not text.endswith("\n\n") and text.isascii()
        assert schema.dumps(json.loads(text)) == text  # sorted keys, one layout


def _worker_accepts(parse: Any, doc: Any) -> bool:
    try:
        parse(json.dumps(doc).encode(), 4096)
    except Rejected:
        return False
    return True


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    doc = {**base, **changes}
    return {k: v for k, v in doc.items() if v is not _DROP}


_DROP = object()
REPORTS = [
    REPORT, _with(REPORT, value=2), _with(REPORT, ts=0), _with(REPORT, note="extra"),
    _with(REPORT, user_id="x" * 128), _with(REPORT, user_id="\U0001f600" * 128),
    _with(REPORT, value="1"), _with(REPORT, value=True), _with(REPORT, value=None),
    _with(REPORT, ts=-1), _with(REPORT, ts="now"), _with(REPORT, user_id=""),
    _with(REPORT, user_id="x" * 129), _with(REPORT, user_id=7), _with(REPORT, report_id=[]),
    _with(REPORT, value=_DROP), _with(REPORT, ts=_DROP), _with(REPORT, user_id=_DROP),
    _with(REPORT, report_id=_DROP), [], "report", 3,
]
MEMBERSHIPS = [
    JOIN, _with(JOIN, group=_DROP), _with(JOIN, group=None), _with(JOIN, event="leave"),
    _with(JOIN, event="joined"), _with(JOIN, event=None), _with(JOIN, group=""),
    _with(JOIN, group=3), _with(JOIN, ts=_DROP), _with(JOIN, ts=-0.5), _with(JOIN, user_id=""),
    _with(JOIN, event=_DROP), {},
]


@pytest.mark.parametrize(("topic", "parse", "doc"),
                         [("reports", parse_report, d) for d in REPORTS]
                         + [("membership", parse_membership, d) for d in MEMBERSHIPS])
def test_input_schemas_accept_what_the_worker_parses(topic: str, parse: Any, doc: Any) -> None:
    assert (errors(topic, doc) == []) == _worker_accepts(parse, doc), doc


def _release(**changes: Any) -> dict[str, Any]:
    record = Release(seq=3, ts=1700000001.0, noisy_sum=12.5, theta=1.25, epsilon=1.0,
                     epsilon_spent=3.0, epsilon_remaining=97.0, pairs=["value_presence"],
                     rule="kantorovich", binding_pair="value_presence", binding_group="g1",
                     priors_seq=2, charge=1.0, window=28333350)
    return {**json.loads(to_bytes(record)), **changes}


GROUP = {"noisy_sum": 3.25, "theta": 2.0, "noise_sd": 2.8, "ci95_half_width": 6.3,
         "noisy_count": 4.75, "count_theta": 2.0, "count_noise_sd": 2.8,
         "count_ci95_half_width": 6.3}


def _priors(**changes: Any) -> dict[str, Any]:
    record = PriorsRecord(seq=2, ts=1700000001.0, group="g1", support=[0.0, 1.0],
                          probs=[0.25, 0.75], epsilon_learn=0.1, epsilon_spent=0.2,
                          radius=0.5, status="learned")
    return {**json.loads(to_bytes(record)), **changes}


def _dead(**changes: Any) -> dict[str, Any]:
    record = dead_letter("reports", b'{"user_id": "\xff', "malformed_json", 1700000000.0)
    return {**json.loads(to_bytes(record)), **changes}


def test_output_schemas_accept_the_records_the_models_write() -> None:
    assert errors("releases", _release()) == []
    assert errors("releases", _release(window=None, binding_pair=None, binding_group=None)) == []
    old = {k: v for k, v in _release().items() if k not in ("priors_seq", "charge", "window")}
    assert errors("releases", old) == [] and Release.model_validate(old)  # older journal records
    grouped = _release(groups={"g1": GROUP, "g2": {**GROUP, "noisy_count": -1.5}})
    assert errors("releases", grouped) == [] and Release.model_validate(grouped).groups
    assert errors("priors", _priors()) == []
    assert errors("priors", _priors(status="void", window=12, radius=2.0)) == []
    assert errors("deadletter", _dead()) == [] and _dead()["raw"] is None  # the default
    kept = dead_letter("reports", b'{"user_id": "\xff', "malformed_json", 1.0, include_raw=True)
    assert errors("deadletter", json.loads(to_bytes(kept))) == []
    null_value = dead_letter("membership", None, "invalid_schema", 0.0)
    assert errors("deadletter", json.loads(to_bytes(null_value))) == []
    located = dead_letter("reports", b"{}", "wrong_partition", 1.0, partition=3, offset=17,
                          detail="expected partition 1 of 4")
    assert errors("deadletter", json.loads(to_bytes(located))) == []


@pytest.mark.parametrize(("topic", "doc"), [
    ("releases", _release(seq=0)), ("releases", _release(theta=-1.0)),
    ("releases", _release(epsilon=0)), ("releases", _release(pairs="value_presence")),
    ("releases", _release(priors_seq=-1)), ("releases", _release(window=1.5)),
    ("releases", {k: v for k, v in _release().items() if k != "noisy_sum"}),
    ("releases", _release(groups={"g1": {k: v for k, v in GROUP.items() if k != "noisy_count"}})),
    ("releases", _release(groups={"g1": {**GROUP, "count_theta": 0.0}})),
    ("releases", _release(groups=[GROUP])),
    ("priors", _priors(radius=2.5)), ("priors", _priors(status="guessed")),
    ("priors", _priors(epsilon_learn=0)), ("priors", _priors(probs=[[0.25]])),
    ("deadletter", _dead(reason="no_reason")), ("deadletter", _dead(raw=5)),
    ("deadletter", {k: v for k, v in _dead().items() if k != "source_topic"}),
    ("deadletter", _dead(partition=-1)), ("deadletter", _dead(offset=2.5)),
    ("deadletter", _dead(detail=7)),
])
def test_output_schemas_reject_what_the_models_reject(topic: str, doc: dict[str, Any]) -> None:
    assert errors(topic, doc), doc
    if topic != "deadletter" or doc.get("reason") != "no_reason":  # reason: a str in the model
        models: dict[str, type[BaseModel]] = {
            "releases": Release, "priors": PriorsRecord, "deadletter": DeadLetter}
        model = models[topic]
        with pytest.raises(ValueError):
            model.model_validate(doc)


def test_check_reports_missing_and_changed_files(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "contracts"
    assert cli.main(["schema", "--out", str(out), "--check"]) == 1
    assert not out.exists()
    assert cli.main(["schema", "--out", str(out)]) == 0
    assert cli.main(["schema", "--out", str(out), "--check"]) == 0
    (out / "priors.schema.json").write_text("{}\n")
    capsys.readouterr()
    assert cli.main(["schema", "--out", str(out), "--check"]) == 1
    err = capsys.readouterr().err
    assert "priors.schema.json" in err and "reports.schema.json" not in err
    assert "run: pufferfish schema --out" in err


@pytest.mark.parametrize(("args", "expected"), [
    (["--out", "{file}"], "pufferfish: error: out: '{file}' exists and is not a directory"),
    (["--out", "{file}/sub"], "pufferfish: error: out: cannot create '{file}/sub': "),
    (["--out", "{file}", "--check"], "pufferfish: error: out: '{file}' exists and is not a"),
    ([], "pufferfish: error: arguments: the following arguments are required: --out"),
    (["--out", ""], "pufferfish: error: out: must name a directory"),
    (["--out", "{dir}", "--bogus"], "pufferfish: error: arguments: unrecognized arguments"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, args: list[str],
                                               expected: str) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory\n")
    fill = {"file": str(a_file), "dir": str(tmp_path / "d")}
    done = subprocess.run(
        [sys.executable, "-m", "stream_app", "schema", *[a.format(**fill) for a in args]],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert done.returncode == 2, done
    assert done.stderr.startswith(expected.format(**fill)), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stdout == "" and a_file.read_text() == "not a directory\n"
    assert not (tmp_path / "d").exists()
