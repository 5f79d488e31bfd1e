"""core.tree_plan: both mechanisms at one window budget, the release budget, windows per day."""

from __future__ import annotations

import math

import pytest

from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.tree import tree_mechanism
from pufferfish_core.tree_plan import compare_mechanisms, release_budget, windows_per_day
from pufferfish_core.vocabulary import PairKind

KINDS = [PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE]
DOMAIN = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def discrete_laplace_sd(theta: float, grid: float) -> float:
    q = math.exp(-grid / theta)
    return grid * math.sqrt(2 * q) / (1 - q)


def test_two_ticks_one_change_worked_by_hand() -> None:
    got = compare_mechanisms(tree_mechanism(2, 1, KINDS, 5.0, DOMAIN, 1.0, grid_log2=0))
    # n = 1: one node (0, 1]; delta_0 = 5 then 0: |5| + |0 - 5| = 10, theta 10 / 1.
    # Tick 0 adds the base, tick 1 the base and the node: 1.5 draws on average.
    assert got.tree.sensitivity == 10.0 and got.tree.scale == pytest.approx(10.0)
    assert got.noise_sd_tree == pytest.approx(discrete_laplace_sd(10.0, 1.0) * math.sqrt(1.5))
    # independent: 2 releases of epsilon 1/2 each, spread 5: theta 2 x 5 / 1 = 10
    assert got.noise_sd_independent == pytest.approx(discrete_laplace_sd(10.0, 1.0))
    assert got.ticks == 2 and got.epsilon == 1.0


def test_a_day_of_ten_second_ticks_without_changes() -> None:
    # w 0: only the base, theta = spread / epsilon_r = 5 / 7.6; independent 8,640 x 5 / 7.6
    got = compare_mechanisms(tree_mechanism(8640, 0, KINDS, 5.0, DOMAIN, 7.6))
    grid = 2.0**-10
    assert got.noise_sd_tree == pytest.approx(discrete_laplace_sd(5 / 7.6, grid))
    assert got.noise_sd_independent == pytest.approx(discrete_laplace_sd(8640 * 5 / 7.6, grid))
    assert got.noise_sd_independent == pytest.approx(8640 * 5 / 7.6 * math.sqrt(2), rel=1e-6)


def test_release_budget_is_exact_on_the_decimals() -> None:
    assert 1 - 7 * 0.1 != 0.3  # the float arithmetic is off by one ulp
    assert release_budget(1, 7, 0.1) == 0.3
    assert release_budget(10, 24, 0.1) == 7.6
    assert release_budget(182, 13, 0.1) == 180.7
    assert release_budget(10, 0, None) == 10.0
    assert release_budget(1, 20, 0.1) == -1.0  # learning leaves nothing: the caller refuses
    with pytest.raises(PufferfishInputError, match="learning_rounds"):
        release_budget(10, -1, 0.1)


@pytest.mark.parametrize(("window", "days"), [
    (86_400, 1),        # one window is a day
    (3_600, 24),        # 24 hours
    (600, 144),
    (2 * 86_400, 1),    # a day lies in one window
    (7 * 3_600, 5),     # a day starting 6 h into a window: 1 + 7 + 7 + 7 + 2 hours
    (100_000, 2),       # longer than a day, not a multiple: a day can straddle two
    (0.1, 864_000),
])
def test_windows_per_day(window: float, days: int) -> None:
    assert windows_per_day(window) == days
