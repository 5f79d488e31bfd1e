"""``pufferfish plan``: both release mechanisms at the configured budget, the contribution bound
and the loss per day.

Expected figures are worked here by hand: the window's learning rounds (multiples of the learn
period in a day), epsilon_r = budget_total - R x epsilon_learn, the independent theta
T x spread / epsilon_r, the tree's sensitivity from its levels (spread x (1 + sum over levels of
min(w, nodes)), reached for these value pairs), its draws per tick by a digit sum written here,
and the discrete Laplace sd on the grid.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stream_app.domain.plan_text import plan_text
from stream_app.domain.planning import plan_summary
from stream_app.settings import Settings

pytestmark = pytest.mark.usefixtures("clean_env")
GRID = 2.0**-10
SHIPPED: dict[str, Any] = {  # the shipped deployments' privacy configuration, in tree mode
    "domain": [0, 1, 2, 3, 4, 5], "pairs": ["value_change", "value_presence"], "rule": "exact",
    "epsilon": 0.5, "release_period_seconds": 10, "prior_source": "learned",
    "epsilon_learn": 0.1, "learn_period_seconds": 3600, "budget_window_seconds": 86400,
    "budget_total": 10, "release_mechanism": "tree", "max_changes_per_window": 4,
}


def laplace_sd(theta: float) -> float:
    q = math.exp(-GRID / theta)
    return GRID * math.sqrt(2 * q) / (1 - q)


def mean_draws(ticks: int, arity: int) -> float:
    """1 + the base-``arity`` digit sum of each tick, averaged."""
    total = 0
    for t in range(ticks):
        total += 1
        while t:
            total += t % arity
            t //= arity
    return total / ticks


def test_tree_a_day_of_ten_second_ticks() -> None:
    got = plan_summary(Settings(**SHIPPED))
    # 24 learning rounds a day (one per hour) of 0.1: 10 - 2.4 = 7.6 for the tree
    both = got["continual"]
    assert (both["ticks"], both["learning_rounds"], both["release_budget"]) == (8640, 24, 7.6)
    # independent at the same budget: 8,640 releases, theta 8,640 x 5 / 7.6 = 5,684.2
    assert got["noise_sd_independent"] == pytest.approx(laplace_sd(8640 * 5 / 7.6), rel=1e-9)
    assert got["noise_sd_independent"] == pytest.approx(8038.7, abs=0.1)
    # arity 15 over n = 8,639 increments: 8,064, 537, 36 and 2 nodes per level, w 4:
    # Delta = 5 x (1 + 4 + 4 + 4 + 2) = 75, node theta 75 / 7.6
    assert got["arity"] == 15
    assert both["sensitivity"] == 75.0
    assert both["node_theta"] == pytest.approx(75 / 7.6)
    sd = laplace_sd(75 / 7.6) * math.sqrt(mean_draws(8640, 15))
    assert got["noise_sd_tree"] == pytest.approx(sd, rel=1e-9)
    assert got["noise_sd"] == got["noise_sd_tree"]
    assert 65 < sd < 66 and got["noise_sd_independent"] / sd > 100
    assert got["window_charge"] == pytest.approx(7.6) and got["window_charge"] <= 7.6
    assert (got["release_mechanism"], got["max_changes_per_window"]) == ("tree", 4)
    # every tick releases: the tree is charged once per window
    assert got["window"]["releases_per_window"] == 8640
    assert got["window"]["learning_rounds_per_window"] == 24
    # a UTC day is one window: loss 10, failure 1 group x (24 + 1 carried in) x 1e-6
    day = got["loss_per_day"]
    assert (day["windows"], day["loss"]) == (1, 10.0)
    assert day["failure_probability"] == pytest.approx(25e-6)


def test_independent_the_old_shipped_configuration() -> None:
    # the compose/k8s settings before the tree: 1 h windows, 182 each, learning every 300 s
    old = {**SHIPPED, "release_mechanism": "independent", "budget_window_seconds": 3600,
           "budget_total": 182, "learn_period_seconds": 300}
    got = plan_summary(Settings(**old))
    assert got["noise_sd"] == pytest.approx(laplace_sd(10.0), rel=1e-12)  # theta 5 / 0.5
    # the same budget spent by independent releases evenly: 182 - 12 x 0.1 = 180.8 over 360
    assert got["continual"]["release_budget"] == 180.8
    assert got["noise_sd_independent"] == pytest.approx(laplace_sd(360 * 5 / 180.8), rel=1e-9)
    assert got["noise_sd_tree"] < got["noise_sd_independent"]
    assert got["window_charge"] == 360 * 0.5
    # the "about 4,368 per day": 24 windows x 182
    day = got["loss_per_day"]
    assert (day["windows"], day["loss"]) == (24, 4368.0)
    assert day["failure_probability"] == pytest.approx((24 * 12 + 1) * 1e-6)


def test_a_day_meets_five_windows_of_seven_hours(tmp_path: Path) -> None:
    priors = tmp_path / "priors.json"
    priors.write_text(json.dumps({"default": {"support": [0, 5], "probs": [0.5, 0.5]}}))
    got = plan_summary(Settings(**{**SHIPPED, "budget_window_seconds": 7 * 3600,
                                   "prior_source": "declared", "priors_file": str(priors)}))
    assert got["continual"]["learning_rounds"] == 0 and got["continual"]["ticks"] == 2520
    day = got["loss_per_day"]  # a day starting 6 h into a window: 1 + 7 + 7 + 7 + 2 hours
    assert (day["windows"], day["loss"], day["failure_probability"]) == (5, 50.0, 0.0)
    assert got["noise_sd_independent"] == pytest.approx(laplace_sd(2520 * 5 / 10), rel=1e-9)


def test_without_a_window_no_tree() -> None:
    plain = {**SHIPPED, "release_mechanism": "independent", "budget_window_seconds": None,
             "budget_total": 100}
    got = plan_summary(Settings(**plain))
    assert got["noise_sd"] == got["noise_sd_independent"] == pytest.approx(laplace_sd(10.0))
    assert got["noise_sd_tree"] is None and got["continual"] is None
    assert got["loss_per_day"]["windows"] is None and got["loss_per_day"]["loss"] == 100


def test_text_shows_both_mechanisms_the_bound_and_the_day() -> None:
    got = plan_summary(Settings(**SHIPPED))
    text = plan_text(got)
    sd_tree, sd_ind = got["noise_sd_tree"], got["noise_sd_independent"]
    assert f"noise standard deviation {sd_tree:.6g} per release (release mechanism tree, " \
           "arity 15" in text
    assert f"noise sd {sd_tree:.6g} tree (max_changes_per_window 4), {sd_ind:.6g} independent" \
           in text
    assert "release budget 7.6 = budget_total 10 - 24 learning rounds x 0.1, over 8640 ticks" \
           in text
    assert "changes at most 4 times per window" in text
    assert ("loss per day: at most 10 = 1 window x budget_total 10 (the most privacy windows a "
            "UTC day meets), except with probability <= 2.5e-05 = 1 groups x 25 learning "
            "rounds x beta 1e-06") in text


def test_cli_tree_json_and_a_budget_the_learning_eats(tmp_path: Path) -> None:
    ok, short = tmp_path / "ok.json", tmp_path / "short.json"
    ok.write_text(json.dumps(SHIPPED))
    short.write_text(json.dumps({**SHIPPED, "budget_total": 2.4}))  # = 24 rounds x 0.1
    run = [sys.executable, "-m", "stream_app", "plan", "--config"]
    done = subprocess.run([*run, str(ok), "--json"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["noise_sd"] == pytest.approx(
        laplace_sd(75 / 7.6) * math.sqrt(mean_draws(8640, 15)))
    done = subprocess.run([*run, str(short)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("pufferfish: error: budget_total: must exceed the learning "
                                  "charges of a window (24 rounds")
    assert len(done.stderr.strip().splitlines()) == 1


def test_plan_and_the_worker_agree_on_every_window_shape() -> None:
    """Issue 42: a window of 1.5 periods alternates windows of 2 and 1 ticks; plan gives each
    length's tree, and the worker opens each window with that sensitivity and arity. The
    one-tick window of distribution_change charges span(D0) = 2 (domain 0..2, w >= 1)."""
    from pufferfish_core.schedule import window_ticks
    from stream_app.domain.priors import public_priors
    from stream_app.metrics import Metrics
    from stream_app.release.publisher import Publisher
    from stream_app.release.tree_release import TreeReleases

    s = Settings(domain=[0, 1, 2], pairs=["distribution_change"], epsilon=1.0,
                 release_mechanism="tree", release_period_seconds=10,
                 budget_window_seconds=15, budget_total=1, max_changes_per_window=1,
                 groups=["a", "b"], default_group="a")
    shapes = {x["ticks"]: x for x in plan_summary(s)["continual"]["window_shapes"]}
    assert sorted(shapes) == [1, 2]
    assert shapes[1]["sensitivity"] == 2.0
    metrics = Metrics.create()
    releases = TreeReleases(s, metrics, Publisher(s, metrics), public_priors(s))
    seen = set()
    for window in range(100, 104):
        first, last = window_ticks(window, 10, 15)
        opened = releases.open(first, window)
        assert opened is not None
        m = opened.mechanism
        seen.add(m.shape.ticks)
        assert (m.sensitivity, m.shape.arity) == (shapes[m.shape.ticks]["sensitivity"],
                                                  shapes[m.shape.ticks]["arity"])
    assert seen == {1, 2}
    assert "windows of two lengths" in plan_text(plan_summary(s))
