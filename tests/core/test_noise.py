"""Statistical and input tests of the CKS20 discrete Laplace sampler (core/noise.py).

Expected values come from the closed-form pmf/CDF, never from the sampler. Every statistical
test rejects only at p < 1e-6, so a correct sampler fails about once in a million runs.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.noise import (
    MAX_EXACT_UNITS,
    bernoulli_exp_neg,
    discrete_laplace_units,
    exact_float,
    grid_contains,
    grid_units,
    sample_discrete_laplace,
    secure_laplace_release,
)

# module-scoped fixtures below: one worker process runs this module (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("test_noise")

# at 1e-6 each test here rejected a correct sampler in 1.1e-6 to 2.8e-6 of runs (the chi-square
# and KS approximations, far in the tail; exact sums and Monte Carlo, 2026-11-27): ~8e-6 a run
P_REJECT = 1e-9


def discrete_laplace_pmf(z: int, scale: float) -> float:
    r = math.exp(-1.0 / scale)
    return (1 - r) / (1 + r) * r ** abs(z)


def discrete_laplace_tail(k: int, scale: float) -> float:
    """Pr[Z > k] for k >= 0 (sum of the geometric tail)."""
    r = math.exp(-1.0 / scale)
    return r ** (k + 1) / (1 + r)


def chi_square_p(samples: list[int], scale: float, half_width: int) -> float:
    counts = np.zeros(2 * half_width + 3)
    for z in samples:
        if z < -half_width:
            counts[0] += 1
        elif z > half_width:
            counts[-1] += 1
        else:
            counts[z + half_width + 1] += 1
    probs = [discrete_laplace_tail(half_width, scale)]
    probs += [discrete_laplace_pmf(z, scale) for z in range(-half_width, half_width + 1)]
    probs += [discrete_laplace_tail(half_width, scale)]
    expected = np.array(probs) * len(samples)
    assert abs(sum(probs) - 1) < 1e-12
    assert expected.min() >= 5, "bins too thin for a chi-square test"
    return float(stats.chisquare(counts, expected).pvalue)


@pytest.fixture(scope="module")
def scale3_samples() -> list[int]:
    return [sample_discrete_laplace(Fraction(3)) for _ in range(20_000)]


def test_discrete_laplace_fits_exact_pmf_scale_3(scale3_samples: list[int]) -> None:
    assert chi_square_p(scale3_samples, 3.0, 15) > P_REJECT


def test_discrete_laplace_fits_exact_pmf_non_integer_scale() -> None:
    scale = Fraction(7, 5)  # exercises the s > 1 branch (Y = X // s)
    samples = [sample_discrete_laplace(scale) for _ in range(10_000)]
    assert chi_square_p(samples, 1.4, 6) > P_REJECT


def test_discrete_laplace_small_scale_is_mostly_zero() -> None:
    samples = [sample_discrete_laplace(Fraction(1, 4)) for _ in range(4_000)]
    assert chi_square_p(samples, 0.25, 0) > P_REJECT


def test_mean_and_variance_match_closed_form(scale3_samples: list[int]) -> None:
    r = math.exp(-1 / 3)
    variance = 2 * r / (1 - r) ** 2  # variance of the discrete Laplace, ~17.8 (not 2*3**2)
    n = len(scale3_samples)
    data = np.array(scale3_samples, dtype=float)
    assert abs(data.mean()) < 6 * math.sqrt(variance / n)
    # Laplace kurtosis ~6: the sample variance has sd ~ variance * sqrt(5 / n).
    assert abs(data.var() - variance) < 8 * variance * math.sqrt(5 / n)


def test_release_matches_continuous_laplace_cdf() -> None:
    theta = 2.0
    outputs = [secure_laplace_release(0.0, theta, -10) for _ in range(5_000)]
    result = stats.kstest(outputs, stats.laplace(loc=0, scale=theta).cdf)
    assert result.pvalue > P_REJECT


@pytest.mark.parametrize(
    ("value", "theta", "grid_log2"),
    [(0.0, 2.0, -10), (3.5, 0.7, -10), (-1000.25, 1e4, -10), (12.0, 0.3, 0), (1.0, 5.0, -3)],
)
def test_output_is_always_on_the_grid(value: float, theta: float, grid_log2: int) -> None:
    outputs = [secure_laplace_release(value, theta, grid_log2) for _ in range(300)]
    assert grid_contains(outputs, grid_log2)
    assert len(set(outputs)) >= 2  # noise was actually added (all-equal: p < 1e-9)


def test_noise_does_not_depend_on_python_or_numpy_random_state() -> None:
    def draw() -> list[float]:
        random.seed(1234)
        np.random.seed(1234)
        return [secure_laplace_release(0.0, 2.0) for _ in range(20)]

    assert draw() != draw()


def test_theta_zero_returns_value_unchanged() -> None:
    assert secure_laplace_release(2.75, 0.0) == 2.75


def test_bernoulli_exp_neg_frequency() -> None:
    for gamma in (Fraction(5, 2), Fraction(1, 3)):
        n = 20_000
        hits = sum(bernoulli_exp_neg(gamma) for _ in range(n))
        p = math.exp(-float(gamma))
        assert stats.binomtest(hits, n, p).pvalue > P_REJECT


@pytest.mark.parametrize(
    ("value", "theta", "field"),
    [
        (0.0, -1.0, "theta"),
        (0.0, math.nan, "theta"),
        (0.0, math.inf, "theta"),
        (math.nan, 1.0, "value"),
        (math.inf, 1.0, "value"),
        (0.1, 1.0, "value"),  # 0.1 is not a multiple of 2**-10
        (2.0**-11, 1.0, "value"),
        (True, 1.0, "value"),
        ("1.0", 1.0, "value"),
        (2**60 + 1, 1.0, "value"),  # not exactly representable as a float
    ],
)
def test_invalid_release_inputs_raise(value: object, theta: float, field: str) -> None:
    with pytest.raises(PufferfishInputError) as info:
        secure_laplace_release(value, theta)  # type: ignore[arg-type]
    assert info.value.field == field


@pytest.mark.parametrize("grid_log2", [1.5, True, -1000, 1000])
def test_invalid_grid_raises(grid_log2: object) -> None:
    with pytest.raises(PufferfishInputError) as info:
        secure_laplace_release(0.0, 1.0, grid_log2)  # type: ignore[arg-type]
    assert info.value.field == "grid_log2"


def test_huge_theta_over_grid_is_refused() -> None:
    with pytest.raises(PufferfishInputError):
        secure_laplace_release(0.0, 1e300, -10)


@pytest.mark.parametrize("scale", [Fraction(0), Fraction(-1), 3.0])
def test_invalid_scale_raises(scale: object) -> None:
    with pytest.raises(PufferfishInputError):
        sample_discrete_laplace(scale)  # type: ignore[arg-type]


def test_grid_contains() -> None:
    assert grid_contains([0.0, 1.0, -2.5, 2.0**-10, 1e6], -10)
    assert not grid_contains([0.0, 0.1], -10)
    assert not grid_contains([math.nan], -10)
    assert not grid_contains([math.inf], -10)
    assert grid_contains([4.0, -8.0], 2)
    assert not grid_contains([2.0], 2)
    assert grid_contains([], -10)
    assert grid_contains([np.float64(0.5), 3], -10)
    assert not grid_contains(["1.0"], -10)  # type: ignore[list-item]
    assert not grid_contains([True], -10)


def test_units_entry_point_is_exact_past_two_to_the_53(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2**53 + 1 units is the first sum a float cannot hold: it reaches the noise as an int
    import pufferfish_core.noise

    units = 2**53 + 1
    monkeypatch.setattr(pufferfish_core.noise, "sample_discrete_laplace", lambda scale: 0)
    assert discrete_laplace_units(units, 1.0, -10) == units
    monkeypatch.setattr(pufferfish_core.noise, "sample_discrete_laplace", lambda scale: -3)
    assert discrete_laplace_units(10**30 + 1, 1.0, -10) == 10**30 - 2
    assert discrete_laplace_units(units, 0.0, -10) == units  # theta 0: unchanged


def test_units_entry_point_draws_from_the_same_sampler() -> None:
    draws = [discrete_laplace_units(2**60 + 7, 0.5, -2) - (2**60 + 7) for _ in range(2000)]
    assert all(isinstance(d, int) for d in draws)
    assert 0 < draws.count(0) < 2000 and max(map(abs, draws)) < 200  # scale 2: mostly small


@pytest.mark.parametrize(("units", "theta", "field"), [
    (1.0, 1.0, "units"), (True, 1.0, "units"), ("1", 1.0, "units"),
    (1, -1.0, "theta"), (1, math.inf, "theta"), (1, math.nan, "theta"),
])
def test_units_entry_point_rejects_bad_inputs(units: object, theta: float, field: str) -> None:
    with pytest.raises(PufferfishInputError) as info:
        discrete_laplace_units(units, theta, -10)  # type: ignore[arg-type]
    assert info.value.field == field
    with pytest.raises(PufferfishInputError):
        discrete_laplace_units(1, 2.0**250, -10)  # theta / g beyond 2**MAX_SCALE_LOG2


def test_exact_float_refuses_rather_than_rounds() -> None:
    g = Fraction(2) ** -10
    assert exact_float(MAX_EXACT_UNITS, -10) == float(MAX_EXACT_UNITS * g)
    assert Fraction(exact_float(-MAX_EXACT_UNITS, -10)) == -MAX_EXACT_UNITS * g  # type: ignore[arg-type]
    assert exact_float(MAX_EXACT_UNITS + 1, -10) is None  # float() would round it to 2**53
    assert exact_float(-(MAX_EXACT_UNITS + 1), -10) is None
    assert exact_float(10**400, 60) is None  # float() would overflow
    assert exact_float(3, -60) == 3 * 2.0**-60
    with pytest.raises(PufferfishInputError):
        exact_float(1.0, -10)  # type: ignore[arg-type]


def test_grid_units_is_exact_float_backwards() -> None:
    assert grid_units(1.25, -2) == 5 and grid_units(-3.0, 0) == -3
    assert grid_units(0.1, -10) is None  # not on the 2**-10 grid
    assert grid_units(2.0**60, 58) == 4
    for units in (0, 1, -7, MAX_EXACT_UNITS):
        assert grid_units(exact_float(units, -10), -10) == units  # type: ignore[arg-type]
