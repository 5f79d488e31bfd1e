"""The ``pufferfish`` command: its entry point for every case, in one subprocess
(tests/cli_batch.py), and the real console script and ``python -m stream_app`` for a spec file.

Expected thetas are derived by hand from the paper's theorems or computed here by a
different method (closed forms + Brent, or a dense grid of outputs), never by core/.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from scipy import optimize

from tests.cli_batch import Job, run_jobs
from tests.oracles import grid_loss

# module-scoped fixtures below: one worker process runs this module (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_cli")]

CONSOLE_SCRIPT = Path(sys.executable).with_name("pufferfish")
COMMAND = [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.exists() else [sys.executable, "-m", "stream_app"]
EPS = 0.5
TIMEOUT_S = 60


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


def run_cli(args: list[str], stdin: str | None = None, cwd: Path | None = None) -> Outcome:
    done = subprocess.run(
        [*COMMAND, *args], input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S,
        cwd=cwd, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


# ---- independent references ----------------------------------------------------------------
def bern(p: float) -> dict[str, list[float]]:
    return {"support": [0, 1], "probs": [1 - p, p]}


EX_I = {"support": [1, 2, 3, 4, 5], "probs": [0.2, 0.225, 0.5, 0.075, 0.0]}  # paper tab:ex2P
EX_J = {"support": [1, 2, 3, 4, 5], "probs": [0.0, 0.075, 0.5, 0.225, 0.2]}
REST = {"support": [0, 1, 2], "probs": [0.25, 0.5, 0.25]}
DELTA0 = {"support": [0], "probs": [1.0]}


def bernoulli_pair_loss(p: float, q: float, theta: float) -> float:
    """ERRATA 12: exact loss of Bernoulli P vs Q, whatever the other users are."""
    return max(
        abs(math.log((1 - p + p * math.exp(s / theta)) / (1 - q + q * math.exp(s / theta))))
        for s in (1, -1)
    )


def root(f: Callable[[float], float], lo: float, hi: float) -> float:
    return float(optimize.brentq(f, lo, hi, xtol=1e-14, rtol=1e-14))


def own_pair(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    pair = spec["pair"]
    if pair == "value_change":
        return {"support": [spec["a"]], "probs": [1.0]}, {"support": [spec["b"]], "probs": [1.0]}
    if pair == "value_presence":
        return {"support": [spec["a"]], "probs": [1.0]}, DELTA0
    if pair == "distribution_presence":
        return spec["P"], DELTA0
    return spec["P"], spec["Q"]


E = math.exp(EPS)
GOOD: dict[str, tuple[dict[str, Any], float]] = {
    # Theorem 1: |a - b| / eps = 2 / 0.5; exact = the same (point masses: loss = |a-b|/theta).
    "vc_bound": ({"pair": "value_change", "rule": "bound", "a": 5, "b": 3}, 4.0),
    "vc_kantorovich": ({"pair": "value_change", "rule": "kantorovich", "a": 5, "b": 3}, 4.0),
    "vc_default_exact": ({"pair": "value_change", "a": 5, "b": 3}, 4.0),
    # Theorem 2: |a| / eps.
    "vp_bound": ({"pair": "value_presence", "rule": "bound", "a": -5}, 10.0),
    "vp_kantorovich": ({"pair": "value_presence", "rule": "kantorovich", "a": -5}, 10.0),
    "vp_exact": ({"pair": "value_presence", "rule": "exact", "a": -5}, 10.0),
    # Theorem 3: max|t| / eps; relaxed closed form for Bernoulli; plan spread of (P, d0) = 1.
    "dp_bound": (
        {"pair": "distribution_presence", "rule": "bound",
         "P": {"support": [-2, 1], "probs": [0.5, 0.5]}}, 4.0),
    "dp_relaxed_bernoulli": (
        {"pair": "distribution_presence", "rule": "relaxed", "P": bern(0.3)},
        1 / math.log((E - 0.7) / 0.3)),
    "dp_relaxed_brent": (
        {"pair": "distribution_presence", "rule": "relaxed",
         "P": {"support": [0, 1, 3], "probs": [0.5, 0.3, 0.2]}},
        root(lambda t: 0.5 + 0.3 * math.exp(1 / t) + 0.2 * math.exp(3 / t) - E, 0.5, 50)),
    "dp_kantorovich": (
        {"pair": "distribution_presence", "rule": "kantorovich", "P": bern(0.3)}, 2.0),
    # Exact for (Bernoulli, d0): the forward tail 1-p+p e^{1/theta} binds -> the relaxed theta.
    "dp_exact": (
        {"pair": "distribution_presence", "rule": "exact", "P": bern(0.3)},
        1 / math.log((E - 0.7) / 0.3)),
    # Theorem 4 on the paper's example (tab:ex2P): sup Delta* = 2 (ERRATA 5).
    "dc_bound": ({"pair": "distribution_change", "rule": "bound", "P": EX_I, "Q": EX_J}, 4.0),
    "dc_kantorovich": (
        {"pair": "distribution_change", "rule": "kantorovich", "P": EX_I, "Q": EX_J}, 4.0),
    "dc_binary": (
        {"pair": "distribution_change", "rule": "binary", "P": bern(0.2), "Q": bern(0.9)}, 2.0),
    # Corrected relaxed binary Lemma (ERRATA 1-3): psi = p/(q-p) (p<q), (1-p)/(p-q) (p>q).
    "dc_relaxed_p_below_q": (
        {"pair": "distribution_change", "rule": "relaxed", "P": bern(0.2), "Q": bern(0.9),
         "rest": REST}, 1 / math.log(E + (E - 1) * 0.2 / 0.7)),
    "dc_relaxed_p_above_q": (
        {"pair": "distribution_change", "rule": "relaxed", "P": bern(0.9), "Q": bern(0.2),
         "rest": REST}, 1 / math.log(E + (E - 1) * 0.1 / 0.7)),
    "dc_exact_bernoulli": (
        {"pair": "distribution_change", "P": bern(0.2), "Q": bern(0.9)},
        root(lambda t: bernoulli_pair_loss(0.2, 0.9, t) - EPS, 0.5, 10)),
    "priors_kantorovich": ({"pair": "priors", "rule": "kantorovich", "P": EX_I, "Q": EX_J}, 4.0),
    "priors_exact": (
        {"pair": "priors", "rule": "exact", "P": EX_I, "Q": EX_J},
        root(lambda t: grid_loss(EX_I, EX_J, t) - EPS, 0.5, 4.0)),
    "priors_exact_bernoulli": (
        {"pair": "priors", "P": bern(0.2), "Q": bern(0.9)},
        root(lambda t: bernoulli_pair_loss(0.2, 0.9, t) - EPS, 0.5, 10)),
}

# The monotone-plan spread of each GOOD pair, by hand (quantile coupling of the two laws):
# EX_I vs EX_J moves level (0.075, 0.2] from 1 to 3 (and (0.8, 0.925] from 3 to 5).
SPREAD: dict[str, float] = {
    "vc_bound": 2, "vc_kantorovich": 2, "vc_default_exact": 2,
    "vp_bound": 5, "vp_kantorovich": 5, "vp_exact": 5,
    "dp_bound": 2, "dp_relaxed_bernoulli": 1, "dp_relaxed_brent": 3, "dp_kantorovich": 1,
    "dp_exact": 1, "dc_bound": 2, "dc_kantorovich": 2, "dc_binary": 1,
    "dc_relaxed_p_below_q": 1, "dc_relaxed_p_above_q": 1, "dc_exact_bernoulli": 1,
    "priors_kantorovich": 2, "priors_exact": 2, "priors_exact_bernoulli": 1,
}

GOOD_SPEC = json.dumps(GOOD["vc_bound"][0])
STDIN = ["--epsilon", str(EPS), "--spec", "-"]
BAD: dict[str, tuple[list[str], str | None]] = {
    "nan_literal": (STDIN, '{"pair": "value_change", "a": NaN, "b": 3}'),
    "infinity_literal": (STDIN, '{"pair": "value_change", "a": Infinity, "b": 3}'),
    "overflow_to_inf": (STDIN, '{"pair": "value_presence", "a": 1e999}'),
    "eps_zero": (["--epsilon", "0", "--spec", "-"], GOOD_SPEC),
    "eps_negative": (["--epsilon", "-1", "--spec", "-"], GOOD_SPEC),
    "eps_nan": (["--epsilon", "nan", "--spec", "-"], GOOD_SPEC),
    "eps_inf": (["--epsilon", "inf", "--spec", "-"], GOOD_SPEC),
    "eps_text": (["--epsilon", "half", "--spec", "-"], GOOD_SPEC),
    "empty_support": (STDIN, json.dumps(
        {"pair": "distribution_presence", "P": {"support": [], "probs": []}})),
    "negative_probs": (STDIN, json.dumps(
        {"pair": "distribution_presence", "P": {"support": [0, 1, 2], "probs": [0.6, -0.1, 0.5]}})),
    "probs_sum_half": (STDIN, json.dumps(
        {"pair": "distribution_presence", "P": {"support": [0, 1], "probs": [0.25, 0.25]}})),
    "probs_length": (STDIN, json.dumps(
        {"pair": "distribution_presence", "P": {"support": [0, 1], "probs": [1.0]}})),
    "binary_non_bernoulli": (STDIN, json.dumps(
        {"pair": "distribution_change", "rule": "binary", "P": EX_I, "Q": EX_J})),
    "relaxed_without_rest": (STDIN, json.dumps(
        {"pair": "distribution_change", "rule": "relaxed", "P": bern(0.2), "Q": bern(0.9)})),
    "rest_where_unused": (STDIN, json.dumps(
        {"pair": "distribution_change", "P": bern(0.2), "Q": bern(0.9), "rest": REST})),
    "unknown_top_key": (STDIN, json.dumps(
        {"pair": "value_change", "a": 5, "b": 3, "sensitivity": 1})),
    "unknown_nested_key": (STDIN, json.dumps(
        {"pair": "distribution_presence", "P": {**bern(0.3), "name": "x"}})),
    "duplicate_key": (STDIN, '{"pair": "value_change", "a": 5, "a": 4, "b": 3}'),
    "unknown_pair": (STDIN, '{"pair": "value_swap", "a": 5, "b": 3}'),
    "unknown_rule": (STDIN, '{"pair": "value_change", "rule": "magic", "a": 5, "b": 3}'),
    "rule_not_applicable": (STDIN, json.dumps(
        {"pair": "priors", "rule": "bound", "P": EX_I, "Q": EX_J})),
    "missing_field": (STDIN, '{"pair": "value_change", "a": 5}'),
    "missing_pair": (STDIN, '{"a": 5, "b": 3}'),
    "equal_values": (STDIN, '{"pair": "value_change", "a": 5, "b": 5}'),
    "string_number": (STDIN, '{"pair": "value_change", "a": "5", "b": 3}'),
    "bool_number": (STDIN, '{"pair": "value_presence", "a": true}'),
    "spec_is_list": (STDIN, "[1, 2]"),
    "malformed_json": (STDIN, '{"pair": "value_change", "a": 5,'),
    "empty_input": (STDIN, ""),
    "missing_file": (["--epsilon", "0.5", "--spec", "/nonexistent/pufferfish-spec.json"], None),
    "missing_epsilon": (["--spec", "-"], GOOD_SPEC),
}
BAD_AUDIT: dict[str, tuple[list[str], str | None]] = {
    "theta_negative": (["--theta", "-1", "--spec", "-"], GOOD_SPEC),
    "theta_nan": (["--theta", "nan", "--spec", "-"], GOOD_SPEC),
    "theta_inf": (["--theta", "inf", "--spec", "-"], GOOD_SPEC),
    "theta_zero_infinite_loss": (["--theta", "0", "--spec", "-"], GOOD_SPEC),
}


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Outcome]:
    """Every case run once through the CLI's entry point."""
    jobs: dict[str, tuple[list[str], str | None]] = {}
    for name, (spec, _) in GOOD.items():
        jobs[f"good:{name}"] = (
            ["calibrate", "--epsilon", str(EPS), "--spec", "-"], json.dumps(spec)
        )
    for name, (args, stdin) in BAD.items():
        jobs[f"bad:{name}"] = (["calibrate", *args], stdin)
    for name, (args, stdin) in BAD_AUDIT.items():
        jobs[f"bad:{name}"] = (["audit", *args], stdin)
    jobs["audit:value"] = (["audit", "--theta", "4", "--spec", "-"], GOOD_SPEC)
    jobs["audit:presence"] = (
        ["audit", "--theta", "2", "--spec", "-"],
        json.dumps({"pair": "distribution_presence", "P": bern(0.3)}),
    )
    jobs["calibrate:theta_zero"] = (
        ["calibrate", *STDIN],
        json.dumps({"pair": "distribution_change", "P": bern(0.5), "Q": bern(0.55)}),
    )
    jobs["bad:unknown_command"] = (["launch"], None)
    jobs["bad:no_command"] = ([], None)
    # one interpreter for all of them (tests/cli_batch.py); the console script itself: below
    got = run_jobs([Job(args, stdin) for args, stdin in jobs.values()])
    return {name: Outcome(o.code, o.stdout, o.stderr) for name, o in zip(jobs, got, strict=True)}


@pytest.mark.parametrize("name", list(GOOD))
def test_calibrate_good_spec(name: str, outcomes: dict[str, Outcome]) -> None:
    spec, expected_theta = GOOD[name]
    out = outcomes[f"good:{name}"]
    assert out.code == 0, out.stderr
    assert out.stderr == ""
    result = json.loads(out.stdout)
    assert result["pair"] == spec["pair"]
    assert result["rule"] == spec.get("rule", "exact")
    assert result["epsilon"] == EPS
    exact_rule = result["rule"] == "exact"
    assert result["theta"] == pytest.approx(expected_theta, rel=1e-6 if exact_rule else 1e-9)
    own = grid_loss(*own_pair(spec), result["theta"])
    assert own <= EPS + 1e-9  # every emitted theta passes the exact two-sided audit
    assert result["loss"] == pytest.approx(own, abs=1e-9)
    # the per-release charge under composition: max(eps, spread / theta)
    assert result["charge"] == pytest.approx(max(EPS, SPREAD[name] / expected_theta), rel=1e-6)
    if exact_rule:  # and is tight: 0.01 % less noise breaks the budget
        assert grid_loss(*own_pair(spec), result["theta"] * (1 - 1e-4)) > EPS
    if "rest" in spec:
        rest = spec["rest"]
        conv = [
            {"support": [x + r for x in d["support"] for r in rest["support"]],
             "probs": [p * w for p in d["probs"] for w in rest["probs"]]}
            for d in (spec["P"], spec["Q"])
        ]
        prior_p, prior_q = (_merge(d) for d in conv)
        expected = grid_loss(prior_p, prior_q, result["theta"])
        assert result["loss_priors"] == pytest.approx(expected, abs=1e-9)
        assert result["loss_priors"] <= EPS + 1e-9


def test_calibrate_charge_is_null_when_the_stream_would_refuse(
    outcomes: dict[str, Outcome],
) -> None:
    # |log 0.5/0.55| <= eps: theta 0, but the plan moves mass by 1 -> an infinite charge
    out = outcomes["calibrate:theta_zero"]
    assert out.code == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["theta"] == 0.0 and result["charge"] is None


def _merge(dist: dict[str, list[float]]) -> dict[str, list[float]]:
    table: dict[float, float] = {}
    for x, p in zip(dist["support"], dist["probs"], strict=True):
        table[float(x)] = table.get(float(x), 0.0) + p
    xs = sorted(table)
    return {"support": xs, "probs": [table[x] for x in xs]}


def test_audit_value_pair(outcomes: dict[str, Outcome]) -> None:
    out = outcomes["audit:value"]
    assert out.code == 0, out.stderr
    assert json.loads(out.stdout) == pytest.approx({"loss": 0.5, "forward": 0.5, "reverse": 0.5})


def test_audit_presence_pair(outcomes: dict[str, Outcome]) -> None:
    out = outcomes["audit:presence"]
    assert out.code == 0, out.stderr
    forward = math.log(0.7 + 0.3 * math.exp(0.5))  # right tail of Bernoulli(0.3) vs d0
    reverse = -math.log(0.7 + 0.3 * math.exp(-0.5))  # left tail
    expected = {"loss": forward, "forward": forward, "reverse": reverse}
    assert json.loads(out.stdout) == pytest.approx(expected, abs=1e-12)


BAD_NAMES = [*BAD, *BAD_AUDIT, "unknown_command", "no_command"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_input_is_one_line_exit_2(name: str, outcomes: dict[str, Outcome]) -> None:
    out = outcomes[f"bad:{name}"]
    assert out.code == 2, (out.stdout, out.stderr)
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("pufferfish: error: ")
    assert "Traceback" not in out.stderr


def test_spec_from_file_and_python_dash_m(tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(GOOD_SPEC, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c",
         "import sys; from stream_app.cli import main; rc = main(sys.argv[1:]); "
         "assert 'faust' not in sys.modules, 'calibrate imported faust'; sys.exit(rc)",
         "calibrate", "--epsilon", "0.5", "--spec", str(spec_file)],
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["theta"] == 4.0
    via_m = subprocess.run(
        [sys.executable, "-m", "stream_app", "calibrate", "--epsilon", "0.5", "--spec",
         str(spec_file)], capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert via_m.returncode == 0, via_m.stderr
    assert json.loads(via_m.stdout)["theta"] == 4.0


def test_missing_forwarded_module_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from stream_app import cli

    monkeypatch.setitem(cli.FORWARDED, "demo", ("stream_app.no_such_module_xyz", "demo"))
    assert cli.main(["demo", "--fast"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("pufferfish: error: demo: ")


def test_version_comes_from_the_one_place(capsys: pytest.CaptureFixture[str]) -> None:
    import tomllib
    from pathlib import Path

    import stream_app
    from stream_app import cli

    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"pufferfish {stream_app.__version__}"
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
