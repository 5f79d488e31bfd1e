"""core/error_bars.py against numbers derived here: the sd by direct summation of the discrete
Laplace pmf, the half-width's coverage by exact convolution of that pmf (a lower bound: the
truncated pmf misses mass, it never adds any), and the continuous quantiles from the closed
forms of the sum of 1, 2 and 3 Laplace densities integrated by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pufferfish_core.error_bars import (
    ErrorBar,
    error_bar,
    laplace_mix_quantile,
    laplace_mix_tail,
    laplace_sum_quantile,
    laplace_sum_tail,
    mixed_error_bar,
)
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


# --- draws of different scales (release_by_group: the total of the groups' noisy sums) ------
def two_scale_tail(x: float, t1: float, t2: float) -> float:
    """Pr[|t1 L1 + t2 L2| > x], t1 != t2, by partial fractions of the characteristic function
    1/((1 + t1^2 s^2)(1 + t2^2 s^2)) = A1/(1 + t1^2 s^2) + A2/(1 + t2^2 s^2): a signed mixture
    of two Laplace laws, each with tail e^(-x/t)."""
    a1, a2 = t1 * t1 / (t1 * t1 - t2 * t2), t2 * t2 / (t2 * t2 - t1 * t1)
    return a1 * math.exp(-x / t1) + a2 * math.exp(-x / t2)


@pytest.mark.parametrize("t1,t2", [(3.0, 1.0), (9.4, 0.3), (2.0, 1.9)])
def test_mixed_tail_and_quantile_against_partial_fractions(t1: float, t2: float) -> None:
    for x in (0.4, 3.0, 11.0, 40.0):
        tail, err = laplace_mix_tail(x, [t1, t2])
        assert tail == pytest.approx(two_scale_tail(x, t1, t2), abs=1e-10)
        assert err < 1e-9
    expected = bisect(lambda x: two_scale_tail(x, t1, t2), 0.0, 500.0)
    got = laplace_mix_quantile([t1, t2])
    assert expected * (1 - 1e-12) <= got <= expected * (1 + 1e-5)


def test_mixed_quantile_of_equal_scales_is_the_closed_form() -> None:
    assert laplace_mix_quantile([2.5, 2.5, 2.5]) == pytest.approx(
        2.5 * laplace_sum_quantile(3), rel=1e-12)
    tail, _ = laplace_mix_tail(2.5 * 4.0, [2.5, 2.5, 2.5])  # the integral agrees with it too
    assert tail == pytest.approx(laplace_sum_tail(4.0, 3), abs=1e-10)


def test_mixed_quantile_lies_between_the_largest_alone_and_its_peakedness_bound() -> None:
    thetas = [65.0, 2.0, 3.0, 2.5, 1.0]
    got = laplace_mix_quantile(thetas)
    assert 65.0 * math.log(20) < got < 65.0 * laplace_sum_quantile(5)


@pytest.mark.parametrize("thetas,grid_log2", [([3.0, 0.7], 0), ([12.5, 2.0, 5.0], 0),
                                              ([2.0, 0.5], -3)])
def test_mixed_error_bar_sd_and_coverage_of_the_discrete_sum(thetas: list[float],
                                                             grid_log2: int) -> None:
    """sd by the summed pmfs; coverage >= 95 % by exact convolution of the discrete pmfs, and
    no wider than the discrete quantile plus 2 grid units per draw."""
    g = 2.0 ** grid_log2
    bar = mixed_error_bar(thetas, grid_log2)
    assert bar.noise_sd == pytest.approx(
        math.sqrt(sum(release_noise_sd(t, g, 1) ** 2 for t in thetas)), rel=1e-12)
    total = pmf(thetas[0], grid_log2)
    for t in thetas[1:]:
        total = np.convolve(total, pmf(t, grid_log2))
    centre = total.size // 2

    def coverage(units: int) -> float:
        return float(total[centre - units: centre + units + 1].sum())

    assert coverage(math.floor(bar.ci95_half_width / g + 1e-9)) >= 0.95
    exact = 0
    while coverage(exact) < 0.95:
        exact += 1
    assert bar.ci95_half_width / g <= exact + 2 * len(thetas) + 1e-9


def test_mixed_error_bar_refuses_no_draws_and_zero_scales() -> None:
    with pytest.raises(PufferfishInputError, match="thetas"):
        mixed_error_bar([], -10)
    with pytest.raises(PufferfishInputError, match="theta"):
        mixed_error_bar([1.0, 0.0], -10)


def test_many_scales_stay_finite_without_warnings() -> None:
    """Twenty groups: the characteristic function's product would overflow for large t (it is
    taken in logs); the quantile lies between the largest scale's alone and its bound."""
    import warnings

    thetas = [float(i + 1) for i in range(20)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = laplace_mix_quantile(thetas)
    assert 20.0 * math.log(20) < got < 20.0 * laplace_sum_quantile(20)
