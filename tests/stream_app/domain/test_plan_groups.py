"""``pufferfish plan`` with release_by_group: per-group theta, sd and half-widths of the sums
and counts (numbers derived here: Proposition 1 by hand, the pmf's sd, ln 20 for one draw), the
charge under parallel composition, the total's comparison, the text lines; and the one-line
refusals of the installed command (tree mode; a group whose sum would need no noise; a grid
coarser than the counts)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stream_app.domain.plan_text import plan_text
from stream_app.domain.planning import plan_summary
from stream_app.settings import load_settings
from tests.installed_cli import one_line_error, pufferfish, user_env
from tests.oracles import release_noise_sd

LAWS = {"narrow": {"support": [0, 1], "probs": [0.5, 0.5]},
        "wide": {"support": [0, 2, 4], "probs": [0.2, 0.3, 0.5]}}
GRID = 2.0**-10


def config(tmp_path: Path, laws: dict[str, object] = LAWS, **extra: object) -> Path:
    priors = tmp_path / "priors.json"
    priors.write_text(json.dumps(laws))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "domain": [0, 1, 2, 3, 4], "pairs": ["distribution_presence"], "epsilon": 0.5,
        "rule": "kantorovich", "prior_source": "declared", "priors_file": str(priors),
        "release_by_group": True, "metrics_port": None, **extra}))
    return path


def test_plan_per_group_figures(tmp_path: Path) -> None:
    s = load_settings(str(config(tmp_path)))
    got = plan_summary(s)["by_group"]
    assert got["group_secret"] is False and got["coordinate_epsilon"] == 0.25
    assert got["charge_per_release"] == pytest.approx(0.5)  # the largest group's, not 2 x 0.5
    for group, top in (("narrow", 1.0), ("wide", 4.0)):
        row = got["groups"][group]
        theta = top / 0.25  # Proposition 1: max |x| on the group's support / eps_c
        assert row["theta_sum"] == pytest.approx(theta)
        assert row["noise_sd_sum"] == pytest.approx(release_noise_sd(theta, GRID, 1), rel=1e-9)
        assert row["ci95_half_width_sum"] == pytest.approx(theta * math.log(20) + GRID, rel=1e-8)
        assert row["theta_count"] == pytest.approx(4.0) and row["count_moves"] is True
        assert row["ci95_half_width_count"] == pytest.approx(4 * math.log(20) + GRID, rel=1e-8)
    total = got["total"]
    sds = [got["groups"][g]["noise_sd_sum"] for g in ("narrow", "wide")]
    assert total["noise_sd_post_processing"] == pytest.approx(math.hypot(*sds))
    # jointly: the total at eps/2 = 0.25 (theta 4 / 0.25 = 16), the groups at eps_c 0.125
    assert total["noise_sd_joint"] == pytest.approx(release_noise_sd(16.0, GRID, 1), rel=1e-9)
    assert total["joint_widens_groups_sd_by"] == pytest.approx(2.0, rel=1e-6)
    assert total["less_error"] == ("post_processing" if math.hypot(*sds) <= total[
        "noise_sd_joint"] else "joint")
    text = plan_text(plan_summary(s))
    assert "per group (release_by_group): charge per release 0.5, parallel" in text
    assert re_line("narrow", 4, 5.65685, text)  # sd of theta 4: sqrt(2) x 4
    assert "has less error" in text


def re_line(group: str, theta: float, sd: float, text: str) -> bool:
    return any(line.split()[:3] == [group, f"{theta:.6g}", f"{sd:.6g}"]
               for line in text.splitlines())


def test_off_keeps_the_plan_as_it_was(tmp_path: Path) -> None:
    s = load_settings(str(config(tmp_path, release_by_group=False)))
    got = plan_summary(s)
    assert got["by_group"] is None and got["release_by_group"] is False
    assert "per group" not in plan_text(got)


def test_refusals_are_one_line(tmp_path: Path) -> None:
    tree = config(tmp_path, release_mechanism="tree", budget_window_seconds=3600)
    error = one_line_error(pufferfish(["plan", "--config", str(tree)], user_env()))
    assert error["field"] == "release_by_group" and "release_mechanism=tree" in error["message"]
    point = config(tmp_path, {"a": {"support": [2], "probs": [1]}, **LAWS},
                   pairs=["value_change"])
    error = one_line_error(pufferfish(["plan", "--json", "--config", str(point)], user_env()))
    assert error["field"] == "release_by_group" and "group 'a'" in error["message"]
    coarse = config(tmp_path, {"even": {"support": [0, 2, 4], "probs": [0.2, 0.3, 0.5]}},
                    domain=[0, 2, 4], grid_log2=1)  # the counts need 1 on the grid
    error = one_line_error(pufferfish(["plan", "--config", str(coarse)], user_env()))
    assert error["field"] == "release_by_group" and "grid_log2 <= 0" in error["message"]
