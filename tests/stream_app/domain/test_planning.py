"""``pufferfish plan``: plan_summary in-process, and the real console script as a subprocess.

Expected values are derived by hand (Thm 2 |a|/eps, Thm 3 max|t|/eps, charge max(eps,
spread/theta), floor(budget/charge), a hand replay of the public clock with exact Fractions) or,
for the exact rule, checked with the independent exact audit: passes at theta, fails at 0.999*theta.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution
from stream_app.domain.plan_text import plan_text
from stream_app.domain.planning import plan_summary
from stream_app.settings import Settings
from tests.cli_batch import Job, run_jobs

REPO = Path(__file__).resolve().parents[3]
CONSOLE_SCRIPT = Path(sys.executable).with_name("pufferfish")
COMMAND = [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.exists() else [sys.executable, "-m", "stream_app"]
TIMEOUT_S = 60

Law = dict[str, list[float]]
G1: Law = {"support": [0, 1, 2], "probs": [0.6, 0.3, 0.1]}
G2: Law = {"support": [0, 1, 2], "probs": [0.2, 0.3, 0.5]}
G3: Law = {"support": [0, 8], "probs": [0.5, 0.5]}
THREE_GROUPS: dict[str, Law] = {"g1": G1, "g2": G2, "g3": G3}
JSON_KEYS = {
    "theta", "epsilon", "rule", "pairs", "binding_group", "binding_pair", "spread",
    "charge_per_release", "noise_sd", "budget_total", "release_period_seconds",
    "releases_until_exhausted", "seconds_until_exhausted", "schedule_capped", "prior_source",
    "learning", "default_group", "groups", "theta_plain", "groups_plain", "radii", "window",
    "failure_probability", "failure_bound", "guarantee",
    # both release mechanisms at the configured budget (test_plan_continual.py)
    "release_mechanism", "max_changes_per_window", "noise_sd_independent", "noise_sd_tree",
    "arity", "window_charge", "continual", "loss_per_day",
    # per-group outputs (test_plan_groups.py): off by default, by_group null
    "release_by_group", "by_group",
}
FAILURE_KEYS = {"groups", "learning_rounds", "learning_rounds_in_horizon", "carried_in_rounds",
                "clock_offset_rounds", "beta_per_round", "horizon", "horizon_seconds", "formula",
                "horizon_unbounded", "over_k_windows"}


# the issue's long horizon: 1e6 budget, 2 groups, beta 1e-6, learning 0.5 every 100 s
MILLION = {"budget_total": 1e6, "groups": ["a", "b"], "default_group": "a",
           "prior_confidence_beta": 1e-6, "epsilon_learn": 0.5, "learn_period_seconds": 100}

pytestmark = [pytest.mark.usefixtures("clean_env"), pytest.mark.slow,
              pytest.mark.xdist_group("test_planning")]


def _settings(**kw: Any) -> Settings:
    return Settings(**kw)


def _dist(spec: Law) -> Distribution:
    return Distribution.from_points(spec["support"], spec["probs"])


def _passes_exactly(a: Distribution, b: Distribution, theta: float, eps: float) -> bool:
    return audit(a, b, theta).loss <= eps + 1e-9


def _replay(total: str, charge: float, period: float, learn: float | None,
            learn_period: float | None, learn_from: Fraction | None = None
            ) -> tuple[int, int, float]:
    """Hand replay of the public clock: each tick a learning round first when one is due
    (the first tick at or after each learning time: learn_from (default learn_period), then
    every learn_period), then a release; the first charge that does not fit stops everything.
    learn_from just above 0: the first tick learns (the start with the most rounds). Exact
    decimal sums."""
    budget, spent = Fraction(total), Fraction(0)
    c, lc = Fraction(repr(charge)), Fraction(repr(learn)) if learn else None
    releases = rounds = 0
    last = 0.0
    next_learn = None
    if learn_period:
        next_learn = Fraction(repr(learn_period)) if learn_from is None else learn_from
    tick = 0
    while True:
        tick += 1
        now = tick * Fraction(repr(period))
        if lc is not None and next_learn is not None and now >= next_learn:
            if spent + lc > budget:
                return releases, rounds, last
            spent += lc
            rounds += 1
            next_learn += Fraction(repr(learn_period))
        if spent + c > budget:
            return releases, rounds, last
        spent += c
        releases += 1
        last = float(now)


FIRST_TICK_LEARNS = Fraction(1, 10**9)


# ---- plan_summary (in-process) ---------------------------------------------------------------
def _three_groups(tmp_path: Path) -> Settings:
    path = tmp_path / "priors.json"
    path.write_text(json.dumps(THREE_GROUPS), encoding="utf-8")
    return _settings(prior_source="declared", priors_file=str(path), domain=list(range(9)),
                    pairs=["distribution_presence", "distribution_change"], rule="exact",
                    epsilon=0.5)


def test_exact_three_groups(tmp_path: Path) -> None:
    s = _three_groups(tmp_path)
    got = plan_summary(s)
    assert set(got) == JSON_KEYS
    eps, theta = 0.5, got["theta"]
    zero = Distribution.point(0.0)
    g3 = _dist(G3)
    assert theta == pytest.approx(9.6177, abs=1e-4)
    assert _passes_exactly(g3, zero, theta, eps)
    assert not _passes_exactly(g3, zero, 0.999 * theta, eps)
    assert got["binding_group"] == "g3" and got["binding_pair"] == "distribution_presence"
    # every pair of every group passes at theta (theta is the max over all of them)
    laws = {g: _dist(spec) for g, spec in THREE_GROUPS.items()}
    for g, law in laws.items():
        assert _passes_exactly(law, zero, theta, eps)
        for h, other in laws.items():
            if h != g:
                assert _passes_exactly(law, other, theta, eps)
    # groups table: 3 groups x 2 pairs, each entry the smallest theta for that group's pairs
    assert set(got["groups"]) == {"g1", "g2", "g3"}
    for g, row in got["groups"].items():
        assert set(row) == {"distribution_presence", "distribution_change"}
        t = row["distribution_presence"]
        assert _passes_exactly(laws[g], zero, t, eps)
        assert not _passes_exactly(laws[g], zero, 0.999 * t, eps)
        t = row["distribution_change"]
        others = [laws[h] for h in laws if h != g]
        assert all(_passes_exactly(laws[g], o, t, eps) for o in others)
        assert any(not _passes_exactly(laws[g], o, 0.999 * t, eps) for o in others)
    # spread 8: the monotone coupling of g3 = {0: .5, 8: .5} with delta_0 moves mass 8 -> 0
    assert got["spread"] == 8.0
    charge = max(0.5, 8 / theta)
    assert charge == pytest.approx(0.8318, abs=1e-4)
    assert got["charge_per_release"] == pytest.approx(charge, rel=1e-12)
    assert got["releases_until_exhausted"] == math.floor(100 / charge) == 120
    assert got["seconds_until_exhausted"] == 120 * 10.0
    assert got["schedule_capped"] is False
    assert got["learning"] is None and got["prior_source"] == "declared"
    assert got["default_group"] is None  # three groups, no default_group
    assert got["noise_sd"] == pytest.approx(math.sqrt(2) * theta, rel=1e-3)
    assert got["budget_total"] == 100.0 and got["release_period_seconds"] == 10.0
    assert got["pairs"] == ["distribution_presence", "distribution_change"]
    assert got["rule"] == "exact" and got["epsilon"] == 0.5
    json.dumps(got, allow_nan=False)  # JSON-able as printed by --json


def test_bound_value_presence_charge_is_epsilon(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"g": {"support": [0, 3], "probs": [0.5, 0.5]}}))
    eps = 0.5
    s = _settings(prior_source="declared", priors_file=str(path), domain=[0, 1, 2, 3],
                 pairs=["value_presence"], rule="bound", epsilon=eps)
    got = plan_summary(s)
    assert got["theta"] == pytest.approx(3 / eps)  # Thm 2
    assert got["charge_per_release"] == eps  # spread 3 / theta 6 = eps: exactly eps
    assert got["noise_sd"] == pytest.approx(math.sqrt(2) * 3 / eps, rel=1e-3)
    assert got["releases_until_exhausted"] == 200  # floor(100 / 0.5)
    assert got["seconds_until_exhausted"] == 2000.0
    assert got["default_group"] == "g" and got["groups"] == {"g": {"value_presence": 6.0}}
    assert got["binding_group"] == "g" and got["binding_pair"] == "value_presence"


def test_learned_defaults_one_uniform_group() -> None:
    got = plan_summary(_settings())
    # defaults: domain {0, 1}, epsilon 1, distribution_presence, kantorovich. The starting law
    # is uniform with radius 2 (it estimates nothing): the ball holds delta_1, so theta is the
    # worst case over the domain, max |t| / eps = 1 (Thm 3). The plain theta (radius 0) of
    # Bernoulli(1/2) vs delta_0 under Prop. 1: the monotone plan's spread 1 / eps = 1.
    theta = 1.0
    assert got["theta"] == pytest.approx(theta, rel=1e-9)
    assert got["theta_plain"] == pytest.approx(1.0, rel=1e-9)  # kantorovich: spread 1 / eps
    assert got["radii"] == {"default": 2.0}
    assert got["default_group"] == "default"
    assert list(got["groups"]) == ["default"]
    assert got["binding_group"] == "default"
    charge = max(1.0, 1.0 / theta)  # spread 1 (mass at 1 coupled to 0): exactly epsilon
    assert got["charge_per_release"] == pytest.approx(charge, rel=1e-6)
    learning = got["learning"]
    assert learning is not None
    assert learning["epsilon_learn"] == 0.1 and learning["learn_period_seconds"] == 60.0
    assert learning["prior_floor"] == 0.05 and learning["learn_min_mass"] == 10.0
    releases, rounds, seconds = _replay("100", charge, 10.0, 0.1, 60.0)
    # by hand: every 6 ticks 6 x 1 + 0.1 = 6.1; 16 cycles = 97.6, ticks 97, 98 -> 99.6, 99 over
    assert (releases, rounds, seconds) == (98, 16, 980.0)
    assert got["releases_until_exhausted"] == releases
    assert learning["rounds_until_exhausted"] == rounds
    assert got["seconds_until_exhausted"] == seconds
    assert got["prior_source"] == "learned"


def test_learned_bound_schedule_replayed_by_hand() -> None:
    s = _settings(domain=[0, 1, 2, 3], pairs=["value_presence"], rule="bound", epsilon=0.5,
                 epsilon_learn=0.1, learn_period_seconds=60, release_period_seconds=10)
    got = plan_summary(s)
    assert got["theta"] == pytest.approx(6.0)  # uniform on 0..3: max |a| = 3, Thm 2
    assert got["charge_per_release"] == 0.5
    releases, rounds, seconds = _replay("100", 0.5, 10.0, 0.1, 60.0)
    # by hand: 32 cycles of (6 x 0.5 + 0.1) = 99.2; tick 193 (no round due) 99.7; 194 over
    assert (releases, rounds, seconds) == (193, 32, 1930.0)
    assert got["releases_until_exhausted"] == 193
    assert got["learning"]["rounds_until_exhausted"] == 32
    assert got["seconds_until_exhausted"] == 1930.0


def test_learn_period_not_a_multiple_of_release_period() -> None:
    # learn every 25 s, release every 10 s: rounds on ticks 3 (30 s), 5 (50 s), 8 (80 s), 10, ...
    s = _settings(domain=[0, 2], pairs=["value_presence"], rule="bound", epsilon=1.0,
                 budget_total=10.0, epsilon_learn=0.5, learn_period_seconds=25)
    got = plan_summary(s)
    assert got["theta"] == pytest.approx(2.0) and got["charge_per_release"] == 1.0
    # hand count: tick1 1, t2 2, t3 2.5+1=3.5, t4 4.5, t5 5+1=6, t6 7, t7 8, t8 8.5+1=9.5,
    # t9 needs 1 -> 10.5 > 10: stop after 8 releases, 3 rounds, at 80 s
    assert _replay("10", 1.0, 10.0, 0.5, 25.0) == (8, 3, 80.0)
    assert got["releases_until_exhausted"] == 8
    assert got["learning"]["rounds_until_exhausted"] == 3
    assert got["seconds_until_exhausted"] == 80.0


# ---- failure probability of learned priors: groups x learning rounds x beta (union bound) ----
def test_failure_learned_no_window_is_g_r_beta_until_exhausted() -> None:
    # three learned groups, uniform starts on {0, 1, 2, 3}, value_presence bound: theta 3 / 0.5,
    # charge 0.5; learning 0.1 every 60 s, release every 10 s: 193 releases, 32 rounds from
    # tick 1 (hand count in test_learned_bound_schedule_replayed_by_hand). A first tick that
    # learns (rounds on ticks 1, 7, 13, ...): after t ticks 0.5 t + 0.1 ceil(t / 6); t = 193
    # costs 96.5 + 3.3 = 99.8, t = 194 is over and does not learn: 193 releases, 33 rounds.
    beta = 2e-5
    s = _settings(domain=[0, 1, 2, 3], pairs=["value_presence"], rule="bound", epsilon=0.5,
                 epsilon_learn=0.1, learn_period_seconds=60, release_period_seconds=10,
                 groups=["a", "b", "c"], default_group="a", prior_confidence_beta=beta)
    got = plan_summary(s)
    assert set(got) == JSON_KEYS
    releases, rounds, seconds = _replay("100", 0.5, 10.0, 0.1, 60.0)
    assert (releases, rounds) == (193, 32)
    assert _replay("100", 0.5, 10.0, 0.1, 60.0, FIRST_TICK_LEARNS)[:2] == (193, 33)
    expected = 3 * 33 * beta
    assert got["failure_probability"] == pytest.approx(expected, rel=1e-12)
    bound = got["failure_bound"]
    assert set(bound) == FAILURE_KEYS
    assert (bound["groups"], bound["learning_rounds"], bound["beta_per_round"]) == (3, 33, beta)
    assert (bound["learning_rounds_in_horizon"], bound["carried_in_rounds"],
            bound["clock_offset_rounds"]) == (32, 0, 1)
    assert bound["horizon"] == "until_exhausted" and bound["horizon_seconds"] == seconds
    assert bound["horizon_unbounded"] is False and bound["over_k_windows"] is None
    assert got["learning"]["rounds_until_exhausted_max"] == 33
    assert got["learning"]["releases_until_exhausted_min"] == 193
    assert "total loss <= budget_total = 100" in got["guarantee"]
    assert f"{expected:.3g}" in got["guarantee"] and "3 groups x 33 learning rounds" in (
        got["guarantee"])


def test_failure_learned_with_windows_is_per_window_plus_the_round_carried_in() -> None:
    # window j = [120 j, 120 (j+1)) s holds the ticks at 120 j + 0, 10, ..., 110 (12 ticks);
    # learning at the multiples of 60 s: 120 j and 120 j + 60, 2 rounds; charges 12 x 1 + 2 x
    # 0.1 = 12.2 <= 100. The radii a window relies on: its 2 rounds plus the round in force
    # when it opens (learned in an earlier window): 3 per window. The learning clock is the
    # epoch's, as the windows are: no round for an offset.
    beta = 1e-4
    s = _settings(groups=["a", "b", "c"], default_group="a", budget_window_seconds=120,
                  prior_confidence_beta=beta)
    got = plan_summary(s)
    window = got["window"]
    assert window["learning_rounds_per_window"] == 2
    assert (window["ticks_per_window"], window["ticks_per_window_max"]) == (12, 12)
    assert (window["releases_per_window"], window["releases_per_window_max"]) == (12, 12)
    assert window["exact"] and window["distinct_windows"] == 1
    expected = 3 * (2 + 1) * beta
    assert got["failure_probability"] == pytest.approx(expected, rel=1e-12)
    bound = got["failure_bound"]
    assert (bound["groups"], bound["learning_rounds"], bound["beta_per_round"]) == (3, 3, beta)
    assert (bound["learning_rounds_in_horizon"], bound["carried_in_rounds"],
            bound["clock_offset_rounds"]) == (2, 1, 0)
    assert bound["horizon"] == "window" and bound["horizon_seconds"] == 120.0
    assert bound["horizon_unbounded"] is True
    assert bound["over_k_windows"]["loss"] == "k * budget_total"
    assert "conditionally on the outputs of earlier windows" in got["guarantee"]
    # every total-loss sentence has its failure probability: over k windows, 3 (2k + 1) beta
    assert ("over k consecutive windows the loss is at most k x budget_total, except with "
            "probability <= min(1, 3 groups x (k x 2 + 1) learning rounds x beta 0.0001)"
            ) in got["guarantee"]
    assert "The horizon is unbounded" in got["guarantee"]


def test_windows_that_differ_are_each_counted() -> None:
    # 90 s windows, 10 s ticks, learning 0.5 every 60 s, budget 8 at 1 per release. Even
    # windows open on a multiple of 60 s: learn 0.5, 6 releases (6.5), the 7th tick (60 s)
    # learns and releases (8), the 8th is over. Odd windows open 30 s past one: 3 releases,
    # the 4th tick learns (3.5), ticks 4..7 release (7.5), the 8th is over. So 7 of 9 ticks
    # release in every window, the 8th (70 s in) is refused, at most 2 rounds a window.
    beta = 1e-6
    s = _settings(domain=[0, 2], pairs=["value_presence"], rule="bound", epsilon=1.0,
                  budget_total=8.0, epsilon_learn=0.5, budget_window_seconds=90,
                  prior_confidence_beta=beta)
    got = plan_summary(s)
    assert got["charge_per_release"] == 1.0
    window = got["window"]
    assert (window["releases_per_window"], window["releases_per_window_max"]) == (7, 7)
    assert (window["ticks_per_window"], window["learning_rounds_per_window"]) == (9, 2)
    assert window["runs_out_before_window_end"] and window["budget_lasts_seconds"] == 70.0
    assert window["distinct_windows"] == 2
    assert got["failure_bound"]["learning_rounds"] == 3
    assert got["failure_probability"] == pytest.approx(3 * beta, rel=1e-12)


def test_windows_beyond_the_enumeration_say_they_are_bounds() -> None:
    # 0.7 s ticks, 100.3 s windows, learning every 61.13 s: the pattern repeats after 42791
    # windows (in 0.01 s units: lcm(70, 6113) / gcd(10030, 427910)), more than are counted;
    # a window holds 143 or 144 ticks (100.3 / 0.7 = 143.3)
    s = _settings(budget_total=9.0, epsilon=0.1, release_period_seconds=0.7,
                  budget_window_seconds=100.3, epsilon_learn=0.5, learn_period_seconds=61.13)
    got = plan_summary(s)
    window = got["window"]
    assert window["exact"] is False and window["distinct_windows"] is None
    assert (window["ticks_per_window"], window["ticks_per_window_max"]) == (143, 144)
    text = plan_text(got)
    assert "bounds over every phase" in text and "the budget lasts at least" in text
    assert "(bounds: at least these releases, at most these rounds)" in text


def test_budget_of_a_million_is_counted_over_the_whole_horizon() -> None:
    # The issue's case: budget 1e6, 2 groups, beta 1e-6, learning 0.5 every 100 s, release 1
    # every 10 s. From tick 1: t + 0.5 floor(t / 10) <= 1e6 up to t = 952381 (exactly 1e6):
    # 952381 releases, 95238 rounds (the old replay stopped at 200,000 ticks: 20,000 rounds,
    # 0.04). A first tick that learns: t + 0.5 ceil(t / 10); t = 952380 costs 999999, tick
    # 952381 learns (999999.5) and its release is over: 95239 rounds. 2 x 95239 x 1e-6.
    s = _settings(budget_total=1e6, groups=["a", "b"], default_group="a",
                  prior_confidence_beta=1e-6, epsilon_learn=0.5, learn_period_seconds=100)
    got = plan_summary(s)
    assert got["charge_per_release"] == 1.0
    assert (got["releases_until_exhausted"], got["learning"]["rounds_until_exhausted"]) == (
        952381, 95238)
    assert got["learning"]["rounds_until_exhausted_max"] == 95239
    assert got["learning"]["releases_until_exhausted_min"] == 952380
    assert got["seconds_until_exhausted"] == 9523810.0
    assert got["schedule_capped"] is False
    assert got["failure_bound"]["learning_rounds"] == 95239
    assert got["failure_probability"] == pytest.approx(0.190478, rel=1e-12)


def test_failure_probability_is_capped_at_one() -> None:
    got = plan_summary(_settings(prior_confidence_beta=0.5))  # 1 group x 17 rounds x 0.5 = 8.5
    assert got["failure_bound"]["learning_rounds"] == 17
    assert got["failure_probability"] == 1.0


def test_failure_declared_is_zero(tmp_path: Path) -> None:
    priors = tmp_path / "p.json"
    priors.write_text(json.dumps(THREE_GROUPS))
    s = _settings(prior_source="declared", priors_file=str(priors), domain=list(range(9)),
                  budget_window_seconds=600)
    got = plan_summary(s)
    assert got["learning"] is None and got["failure_probability"] == 0.0
    bound = got["failure_bound"]
    assert (bound["groups"], bound["learning_rounds"], bound["beta_per_round"]) == (3, 0, None)
    assert bound["carried_in_rounds"] == 0 and bound["clock_offset_rounds"] == 0
    assert bound["horizon"] == "window"
    assert "except with probability" not in got["guarantee"]
    assert "conditionally on the outputs of earlier windows" in got["guarantee"]


def test_budget_smaller_than_one_charge() -> None:
    s = _settings(domain=[0, 2], pairs=["value_presence"], rule="bound", epsilon=1.0,
                 budget_total=0.5)
    got = plan_summary(s)
    assert got["releases_until_exhausted"] == 0 and got["seconds_until_exhausted"] == 0


# ---- the console script ----------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONWARNINGS"] = "ignore"
    return env


def _run(args: list[str], cwd: Path) -> Outcome:
    done = subprocess.run([*COMMAND, "plan", *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=cwd, env=_env())
    return Outcome(done.returncode, done.stdout, done.stderr)


def _config(d: Path, name: str, cfg: dict[str, Any], priors: Any = None) -> str:
    if priors is not None:
        p = d / f"{name}.priors.json"
        p.write_text(priors if isinstance(priors, str) else json.dumps(priors))
        cfg = {**cfg, "priors_file": str(p)}
    path = d / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _cases(d: Path) -> dict[str, list[str]]:
    declared = {"prior_source": "declared"}
    return {
        "three-groups-json": ["--json", "--config", _config(d, "three-groups", {
            **declared, "domain": list(range(9)), "rule": "exact", "epsilon": 0.5,
            "pairs": ["distribution_presence", "distribution_change"]}, THREE_GROUPS)],
        "three-groups-text": ["--config", str(d / "three-groups.json")],
        "defaults-json": ["--json"],
        "defaults-text": [],
        "million-json": ["--json", "--config", _config(d, "million", MILLION)],
        "million-text": ["--config", str(d / "million.json")],
        "windows-text": ["--config", _config(d, "windows", {
            "groups": ["a", "b", "c"], "default_group": "a", "budget_window_seconds": 120,
            "prior_confidence_beta": 1e-4})],
        "bad-epsilon-learn": ["--config", _config(d, "el", {"epsilon_learn": 0})],
        "bad-prior-floor": ["--config", _config(d, "pf", {"prior_floor": 1.5})],
        "bad-support": ["--config", _config(d, "sup", {**declared, "domain": [0, 1, 2]},
                                            {"g": {"support": [0, 7], "probs": [0.5, 0.5]}})],
        "priors-missing": ["--config", _config(d, "pm", {
            **declared, "priors_file": str(d / "does-not-exist.json")})],
        "priors-not-json": ["--config", _config(d, "pnj", declared, "{nope")],
        "priors-not-utf8": ["--config", _config(d, "pnu", declared, "overwritten")],
        "declared-no-file": ["--config", _config(d, "dnf", declared)],
        "change-one-group": ["--config", _config(d, "c1", {"pairs": ["distribution_change"]})],
        "no-noise": ["--config", _config(d, "nn", {**declared, "pairs": ["value_presence"]},
                                         {"g": {"support": [0], "probs": [1]}})],
        "release-every-events": ["--config", _config(d, "ree", {"release_every_events": 5})],
        "unknown-flag": ["--bogus"],
        "config-missing": ["--config", str(d / "missing.json")],
    }


BAD: dict[str, tuple[str, str | None]] = {  # case -> (field, needle in the message)
    "bad-epsilon-learn": ("epsilon_learn", None),
    "bad-prior-floor": ("prior_floor", None),
    "bad-support": ("priors_file.g.support", "7"),
    "priors-missing": ("priors_file", None),
    "priors-not-json": ("priors_file", None),
    "priors-not-utf8": ("priors_file", None),
    "declared-no-file": ("priors_file", None),
    "change-one-group": ("pairs", None),
    "no-noise": ("pairs", "no configured pair needs noise"),
    "release-every-events": ("release_every_events", None),
    "unknown-flag": ("arguments", "--bogus"),
    "config-missing": ("config", None),
}


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Every ``pufferfish plan`` case of this module through the CLI's entry point, in one
    subprocess (tests/cli_batch.py); the console script itself: ``test_console_script_plan``."""
    d = tmp_path_factory.mktemp("plan")
    cases = _cases(d)
    (d / "pnu.priors.json").write_bytes(b"\xff\xfe\x00{}")  # not UTF-8
    got = run_jobs([Job(["plan", *args], env=_env(), cwd=str(d)) for args in cases.values()])
    return {name: Outcome(o.code, o.stdout, o.stderr) for name, o in zip(cases, got, strict=True)}


def test_console_script_plan(tmp_path: Path) -> None:
    """The installed console script, once: the same JSON as through the entry point."""
    out = _run(["--json"], tmp_path)
    assert out.code == 0 and out.stderr == "", out.stderr
    assert json.loads(out.stdout)["theta"] > 0


def test_cli_three_groups_json(cli: dict[str, Outcome]) -> None:
    out = cli["three-groups-json"]
    assert out.code == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    got = json.loads(lines[0])
    assert set(got) >= {
        "theta", "binding_group", "binding_pair", "charge_per_release", "noise_sd",
        "releases_until_exhausted", "seconds_until_exhausted", "groups",
    }
    assert set(got) == JSON_KEYS
    theta = got["theta"]
    g3, zero = _dist(G3), Distribution.point(0.0)
    assert _passes_exactly(g3, zero, theta, 0.5)
    assert not _passes_exactly(g3, zero, 0.999 * theta, 0.5)
    assert theta == pytest.approx(9.6177, abs=1e-4)
    assert (got["binding_group"], got["binding_pair"]) == ("g3", "distribution_presence")
    charge = max(0.5, 8 / theta)
    assert got["charge_per_release"] == pytest.approx(charge, rel=1e-12)
    assert got["releases_until_exhausted"] == math.floor(100 / charge) == 120
    assert got["seconds_until_exhausted"] == got["releases_until_exhausted"] * 10
    assert got["noise_sd"] == pytest.approx(math.sqrt(2) * theta, rel=1e-3)
    assert got["learning"] is None
    assert got["failure_probability"] == 0.0  # declared priors: no learned radius
    assert got["failure_bound"]["groups"] == 3 and got["failure_bound"]["learning_rounds"] == 0
    assert got["schedule_capped"] is False
    assert got["failure_bound"]["beta_per_round"] is None
    assert got["guarantee"].startswith("total loss <= budget_total = 100")
    assert {g: set(r) for g, r in got["groups"].items()} == {
        g: {"distribution_presence", "distribution_change"} for g in ("g1", "g2", "g3")
    }
    assert out.stderr == ""


def test_cli_three_groups_text(cli: dict[str, Outcome]) -> None:
    out = cli["three-groups-text"]
    assert out.code == 0, out.stderr
    text = out.stdout
    theta = re.search(r"^theta ([0-9.]+) \(plain, radius 0: [0-9.]+; binding: group g3, "
                      r"pair distribution_presence",
                      text, re.M)
    charge = re.search(r"^charge per release ([0-9.]+)", text, re.M)
    assert theta and charge, text
    assert float(theta.group(1)) == pytest.approx(9.6177, abs=1e-4)
    assert float(charge.group(1)) == pytest.approx(8 / float(theta.group(1)), rel=1e-5)
    assert "120 releases" in text and "g3" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_cli_learned_defaults(cli: dict[str, Outcome]) -> None:
    out = cli["defaults-json"]
    assert out.code == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["default_group"] == "default" and list(got["groups"]) == ["default"]
    assert got["theta"] == pytest.approx(1.0, rel=1e-9)
    assert got["theta_plain"] == pytest.approx(1.0, rel=1e-9)  # kantorovich: spread 1 / eps
    assert got["learning"]["rounds_until_exhausted"] == 16
    assert got["releases_until_exhausted"] == 98
    # defaults: 1 group; 16 rounds from tick 1, 17 from a first tick that learns (after t
    # ticks t + 0.1 ceil(t / 6): t = 98 costs 99.7, t = 99 is over and does not learn)
    assert _replay("100", 1.0, 10.0, 0.1, 60.0, FIRST_TICK_LEARNS) == (98, 17, 980.0)
    assert got["failure_probability"] == pytest.approx(1 * 17 * 1e-6, rel=1e-12)
    assert (got["failure_bound"]["groups"], got["failure_bound"]["learning_rounds"],
            got["failure_bound"]["beta_per_round"]) == (1, 17, 1e-6)
    text = cli["defaults-text"].stdout
    assert re.search(r"^failure probability 1\.7e-05 = 1 groups x 17 learning rounds x beta "
                     r"1e-06, until the budget is exhausted \(the most rounds of any start "
                     r"time\)$", text, re.M), text
    assert re.search(r"^guarantee: total loss <= budget_total = 100 .*except with probability "
                     r"<= 1\.7e-05", text, re.M), text
    assert re.search(r"^budget 100: 98 releases, 980 s at one per 10 s, with 16 learning "
                     r"rounds .* from another first tick: at least 98 releases, at most 17 "
                     r"learning rounds\)$", text, re.M), text
    assert cli["defaults-text"].code == 0
    assert "theta" in text and "charge per release" in text and "learning rounds" in text


def test_cli_budget_of_a_million(cli: dict[str, Outcome]) -> None:
    # figures derived by hand in test_budget_of_a_million_is_counted_over_the_whole_horizon
    got = json.loads(cli["million-json"].stdout)
    assert got["failure_probability"] == pytest.approx(2 * 95239 * 1e-6, rel=1e-12)
    assert got["failure_bound"]["learning_rounds"] == 95239
    assert got["releases_until_exhausted"] == 952381 and got["schedule_capped"] is False
    assert f"<= {2 * 95239 * 1e-6:.3g} = 2 groups x 95239 learning rounds" in got["guarantee"]
    out = cli["million-text"]
    assert out.code == 0, out.stderr
    assert re.search(r"^failure probability 0\.19 = 2 groups x 95239 learning rounds x beta "
                     r"1e-06, until the budget is exhausted", out.stdout, re.M), out.stdout
    assert re.search(r"^budget 1e\+06: 952381 releases, 9\.52381e\+06 s at one per 10 s, "
                     r"with 95238 learning rounds .* at least 952380 releases, at most 95239 "
                     r"learning rounds\)$", out.stdout, re.M), out.stdout
    assert re.search(r"^guarantee: total loss <= budget_total = 1e\+06 .* except with "
                     r"probability <= 0\.19 = 2 groups x 95239", out.stdout, re.M), out.stdout


def test_cli_windows_text_has_every_failure_probability(cli: dict[str, Outcome]) -> None:
    # the figures of test_failure_learned_with_windows_is_per_window_plus_the_round_carried_in
    out = cli["windows-text"]
    assert out.code == 0, out.stderr
    assert re.search(r"^privacy window 120 s \(budget_total per window; window j covers "
                     r"\[j x 120, \(j\+1\) x 120\) s since the epoch\): 12 of 12 ticks "
                     r"release, the budget lasts 120 s of each window \(every window alike\)$",
                     out.stdout, re.M), out.stdout
    assert re.search(r"^failure probability 0\.0009 = 3 groups x 3 learning rounds x beta "
                     r"0\.0001, per privacy window", out.stdout, re.M), out.stdout
    guarantee = re.search(r"^guarantee: (.*)$", out.stdout, re.M)
    assert guarantee, out.stdout
    # each loss statement of the sentence is followed by its failure probability
    for loss in ("(budget_total = 100)-pufferfish private", "at most k x budget_total"):
        after = guarantee.group(1).split(loss, 1)[1]
        assert after.split(";")[0].split(". ")[0].count("except with probability <=") == 1, (
            loss, guarantee.group(1))
    assert "The horizon is unbounded" in guarantee.group(1)


@pytest.mark.parametrize("case", sorted(BAD))
def test_cli_bad_input_is_one_line_exit_2(cli: dict[str, Outcome], case: str) -> None:
    field, needle = BAD[case]
    out = cli[case]
    assert out.code == 2, (out.code, out.stdout, out.stderr)
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert lines[0].startswith(f"pufferfish: error: {field}:"), lines[0]
    if needle is not None:
        assert needle in lines[0]
