"""`pufferfish calibrate/audit` on bad spec files: one line on stderr, exit 2, no traceback.

The fixed corpus (corpus/bad_specs/) runs through the real console entry point in a
subprocess; the hypothesis part calls cli.main in-process on generated documents.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_app import cli
from tests.reliability.harness import CORPUS, REPO

ALL_BAD_SPECS = sorted((CORPUS / "bad_specs").glob("*.json"))
# Nesting deeper than Python's recursion limit: its own test (a distinct failure mode).
DEEP = [p for p in ALL_BAD_SPECS if p.name.startswith("deeply_nested")]
BAD_SPECS = [p for p in ALL_BAD_SPECS if p not in DEEP]
PREFIX = "pufferfish: error: "


def _assert_one_line_error(code: int, stdout: str, stderr: str) -> None:
    assert code == 2, f"exit {code}, stderr: {stderr[-800:]}"
    assert "Traceback" not in stderr and "Traceback" not in stdout, stderr[-800:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-800:]
    assert lines[0].startswith(PREFIX), lines[0]
    assert len(lines[0]) < 400, "error line should be short"
    assert stdout.strip() == ""


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stream_app", *args], cwd=str(REPO), capture_output=True,
        text=True, timeout=60,
    )


def test_corpus_is_there() -> None:
    assert len(BAD_SPECS) >= 40 and len(DEEP) == 2
    assert all((CORPUS / "bad_specs" / n).is_file() for n in SUBPROCESS_SUBSET)


COMMANDS = [("calibrate", "--epsilon", "1"), ("audit", "--theta", "2")]
# The real entry point in a subprocess for a representative subset (each start costs ~1 s);
# every corpus file also runs through cli.main in-process below.
SUBPROCESS_SUBSET = ["not_json.json", "nan_literal.json", "P_half_mass.json",
                     "invalid_utf8.json"]


def _first_line(exc: AssertionError) -> str:
    return str(exc).strip().splitlines()[-1][:240] if str(exc).strip() else "?"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", COMMANDS, ids=["calibrate", "audit"])
def test_bad_spec_subset_subprocess(command: tuple[str, ...]) -> None:
    failures = []
    for name in SUBPROCESS_SUBSET:
        proc = _run_cli(*command, "--spec", str(CORPUS / "bad_specs" / name))
        try:
            _assert_one_line_error(proc.returncode, proc.stdout, proc.stderr)
        except AssertionError as exc:
            failures.append(f"{name}: exit {proc.returncode}: {_first_line(exc)}")
    assert not failures, "\n".join(failures)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", COMMANDS, ids=["calibrate", "audit"])
def test_bad_spec_corpus_in_process(command: tuple[str, ...],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    failures = []
    for spec in BAD_SPECS:
        try:
            code = cli.main([*command, "--spec", str(spec)])
            out, err = capsys.readouterr()
            _assert_one_line_error(code, out, err)
        except AssertionError as exc:
            failures.append(f"{spec.name}: {_first_line(exc)}")
        except BaseException as exc:  # noqa: BLE001 - an escaping exception is the bug
            capsys.readouterr()
            failures.append(f"{spec.name}: cli.main raised {type(exc).__name__}")
    assert not failures, "\n".join(failures)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spec", DEEP, ids=lambda p: p.stem)
def test_deeply_nested_spec_is_a_one_line_error(spec: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """json.loads raises RecursionError (not JSONDecodeError) past ~1000 levels of nesting."""
    proc = _run_cli("calibrate", "--epsilon", "1", "--spec", str(spec))
    _assert_one_line_error(proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args", [
    ("calibrate", "--epsilon", "0"),
    ("calibrate", "--epsilon", "-1"),
    ("calibrate", "--epsilon", "nan"),
    ("calibrate", "--epsilon", "inf"),
    ("calibrate", "--epsilon", "abc"),
    ("audit", "--theta", "-1"),
    ("audit", "--theta", "nan"),
    ("audit", "--theta", "inf"),
], ids=lambda a: "_".join(a).replace("--", ""))
def test_bad_numbers_on_command_line(args: tuple[str, ...],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(CORPUS / "good_spec.json")
    if args[-1] in ("nan", "-1"):  # two of them through the real entry point
        proc = _run_cli(*args, "--spec", spec)
        _assert_one_line_error(proc.returncode, proc.stdout, proc.stderr)
    else:
        code = cli.main([*args, "--spec", spec])
        out, err = capsys.readouterr()
        _assert_one_line_error(code, out, err)


@pytest.mark.timeout(60)
def test_missing_and_unreadable_spec_files(tmp_path: Path) -> None:
    for target in (tmp_path / "does-not-exist.json", tmp_path):
        proc = _run_cli("calibrate", "--epsilon", "1", "--spec", str(target))
        _assert_one_line_error(proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.timeout(60)
def test_good_spec_still_works() -> None:
    """Control: the corpus fails for its defects, not because the CLI fails on everything."""
    proc = _run_cli("calibrate", "--epsilon", "1", "--spec", str(CORPUS / "good_spec.json"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["theta"] == pytest.approx(3.0)  # Thm 1: |a - b| / eps = |4 - 1| / 1


# ---- hypothesis: generated documents through cli.main in-process --------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(max_size=8),
)
_json_docs = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                  max_size=4),
    max_leaves=12,
)
_numbers = st.one_of(
    st.integers(-5, 5), st.floats(-1e6, 1e6, allow_nan=False), st.just(1e308),
    st.just(-0.0), st.just(5e-324), st.text(max_size=3), st.none(), st.booleans(),
)
_dist = st.fixed_dictionaries({
    "support": st.lists(_numbers, max_size=5),
    "probs": st.lists(_numbers, max_size=5),
})
_specs = st.fixed_dictionaries(
    {"pair": st.sampled_from(["value_change", "value_presence", "distribution_presence",
                              "distribution_change", "priors", "bogus", 3])},
    optional={
        "rule": st.sampled_from(["exact", "bound", "relaxed", "kantorovich", "binary", "x"]),
        "a": _numbers, "b": _numbers, "P": _dist | _json_docs, "Q": _dist | _json_docs,
        "rest": _dist,
    },
)


def _run_in_process(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str,
                    args: list[str]) -> tuple[int, str, str]:
    spec = tmp_path / "spec.json"
    spec.write_text(text)
    code = cli.main([*args, "--spec", str(spec)])
    out, err = capsys.readouterr()
    return code, out, err


def _check_outcome(code: int, out: str, err: str) -> None:
    if code == 0:
        result = json.loads(out)
        assert all(not isinstance(v, float) or math.isfinite(v) for v in result.values())
        assert err == ""
    else:
        _assert_one_line_error(code, out, err)


@pytest.mark.timeout(240)
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(doc=_json_docs | _specs, command=st.sampled_from(["calibrate", "audit"]))
def test_fuzzed_specs_never_crash(doc: object, command: str,
                                  capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["calibrate", "--epsilon", "0.7"] if command == "calibrate" else [
        "audit", "--theta", "1.5"]
    try:
        code, out, err = _run_in_process(capsys, tmp_path, json.dumps(doc), args)
    except BaseException as exc:  # noqa: BLE001 - any escape is the bug under test
        pytest.fail(f"cli.main raised {type(exc).__name__}: {exc!s:.200} for {doc!r:.300}")
    _check_outcome(code, out, err)


@pytest.mark.timeout(120)
@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60) | st.binary(max_size=60).map(
    lambda b: b.decode("latin-1")))
def test_fuzzed_spec_text_never_crashes(text: str, capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    try:
        code, out, err = _run_in_process(capsys, tmp_path, text,
                                         ["calibrate", "--epsilon", "1"])
    except BaseException as exc:  # noqa: BLE001
        pytest.fail(f"cli.main raised {type(exc).__name__}: {exc!s:.200} for {text!r:.200}")
    _check_outcome(code, out, err)
