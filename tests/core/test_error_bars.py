"""core/error_bars.py against numbers derived here: the sd by direct summation of the discrete
Laplace pmf, the half-width's coverage by exact convolution of that pmf (a lower bound: the
truncated pmf misses mass, it never adds any), and the continuous quantiles from the closed
forms of the sum of 1, 2 and 3 Laplace densities integrated by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pufferfish_core.error_bars import ErrorBar, error_bar, laplace_sum_quantile, laplace_sum_tail
from pufferfish_core.errors import PufferfishInputError
from tests.oracles import discrete_laplace_pmf, release_noise_sd


def pmf(theta: float, grid_log2: int) -> np.ndarray:
    return discrete_laplace_pmf(theta, 2.0**grid_log2)[1]


def exact_coverage(theta: float, grid_log2: int, draws: int, units: int) -> float:
    """Pr[|S| <= units] for S a sum of ``draws`` draws, in grid units: a lower bound (the
    truncated pmf of tests.oracles misses mass, it never adds any)."""
    one = pmf(theta, grid_log2)
    total = one
    for _ in range(draws - 1):
        total = np.convolve(total, one)
    centre = total.size // 2
    return float(total[centre - units: centre + units + 1].sum())


def bisect(f, low: float, high: float) -> float:  # noqa: ANN001 - f: float -> float, decreasing
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) > 0.05 else (low, mid)
    return high


@pytest.mark.parametrize("theta,grid_log2", [(3.0, 0), (0.7, 0), (2.0, -3), (40.0, 2)])
@pytest.mark.parametrize("draws", [1, 4])
def test_sd_is_the_summed_pmf_variance(theta: float, grid_log2: int, draws: int) -> None:
    assert error_bar(theta, grid_log2, draws).noise_sd == pytest.approx(
        release_noise_sd(theta, 2.0**grid_log2, draws), rel=1e-12)


def test_one_draw_quantile_is_log_20() -> None:
    """Pr[|L| > x] = e^-x for one Laplace: x = ln 20; the grid slack is one unit."""
    assert laplace_sum_quantile(1) == pytest.approx(math.log(20), rel=1e-8)
    assert laplace_sum_quantile(1) >= math.log(20)
    bar = error_bar(9.375, -10, 1)
    assert bar.ci95_half_width == pytest.approx(9.375 * math.log(20) + 2.0**-10, rel=1e-8)


@pytest.mark.parametrize("draws,tail", [
    (2, lambda x: math.exp(-x) * (1 + x / 2)),  # density (1 + |x|) e^-|x| / 4
    (3, lambda x: math.exp(-x) * (8 + 5 * x + x * x) / 8),  # (3 + 3|x| + x^2) e^-|x| / 16
])
def test_sum_quantiles_from_the_densities(draws: int, tail) -> None:  # noqa: ANN001
    for x in (0.0, 0.5, 2.0, 7.0):
        assert laplace_sum_tail(x, draws) == pytest.approx(tail(x), rel=1e-12)
    expected = bisect(tail, 0.0, 50.0)
    assert laplace_sum_quantile(draws) == pytest.approx(expected, rel=1e-8)
    assert laplace_sum_quantile(draws) >= expected * (1 - 1e-12)


@pytest.mark.parametrize("theta,grid_log2", [(3.0, 0), (0.7, 0), (12.5, 0), (2.0, -3)])
@pytest.mark.parametrize("draws", [1, 2, 3, 5, 8])
def test_half_width_covers_the_discrete_sum(theta: float, grid_log2: int, draws: int) -> None:
    """Coverage >= 95 % by exact convolution, and no wider than the discrete quantile plus
    2 x draws grid units (the coupling's slack)."""
    g = 2.0 ** grid_log2
    half = error_bar(theta, grid_log2, draws).ci95_half_width
    units = math.floor(half / g + 1e-9)
    assert exact_coverage(theta, grid_log2, draws, units) >= 0.95
    exact = 0
    while exact_coverage(theta, grid_log2, draws, exact) < 0.95:
        exact += 1
    assert half / g <= exact + 2 * draws + 1e-9


def test_many_draws_and_a_fine_grid_stay_cheap_and_ordered() -> None:
    widths = [error_bar(9.375, -10, n).ci95_half_width for n in (1, 5, 17, 60)]
    assert widths == sorted(widths)
    # with many draws the sum is nearly normal: 1.96 sd, a little wider (heavier tails)
    bar = error_bar(9.375, -10, 60)
    assert 1.96 * bar.noise_sd < bar.ci95_half_width < 2.0 * bar.noise_sd


def test_theta_zero_and_bad_inputs() -> None:
    assert error_bar(0.0, -10, 3) == ErrorBar(noise_sd=0.0, ci95_half_width=0.0)
    with pytest.raises(PufferfishInputError, match="draws"):
        error_bar(1.0, -10, 0)
    with pytest.raises(PufferfishInputError, match="theta"):
        error_bar(-1.0, -10, 1)
