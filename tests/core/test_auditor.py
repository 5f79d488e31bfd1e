"""The exact auditor against a dense grid of y evaluated in plain (not log) arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pufferfish_core.auditor import PairAuditor, audit
from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishInputError


def grid_loss(a: Distribution, b: Distribution, theta: float) -> tuple[float, float]:
    """max over 20k grid points (plus the support points) of log ratio, both directions."""
    ax, ap = a.arrays()
    bx, bp = b.arrays()
    lo = min(ax.min(), bx.min()) - 30 * theta
    hi = max(ax.max(), bx.max()) + 30 * theta
    ys = np.union1d(np.linspace(lo, hi, 20_000), np.union1d(ax, bx))

    def density(xs: np.ndarray, ps: np.ndarray) -> np.ndarray:
        out: np.ndarray = (ps[None, :] * np.exp(-np.abs(ys[:, None] - xs[None, :]) / theta)).sum(
            axis=1
        )
        return out

    log_ratio = np.log(density(ax, ap)) - np.log(density(bx, bp))
    return float(log_ratio.max()), float(-log_ratio.min())


def random_law(rng: np.random.Generator) -> Distribution:
    k = int(rng.integers(1, 10))
    xs = rng.choice(np.arange(-8, 9), size=k, replace=False)
    return Distribution.from_points(xs.tolist(), rng.dirichlet(np.ones(k)).tolist())


@pytest.mark.parametrize("seed", range(30))
def test_matches_dense_grid(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = random_law(rng), random_law(rng)
    theta = float(np.exp(rng.uniform(np.log(0.5), np.log(20))))
    forward, reverse = grid_loss(a, b, theta)
    result = audit(a, b, theta)
    assert result.forward == pytest.approx(forward, rel=1e-9, abs=1e-12)
    assert result.reverse == pytest.approx(reverse, rel=1e-9, abs=1e-12)
    assert result.loss == max(result.forward, result.reverse)


def test_point_masses() -> None:
    r = audit(Distribution.point(5), Distribution.point(3), 0.5)
    assert (r.loss, r.forward, r.reverse) == pytest.approx((4.0, 4.0, 4.0), rel=1e-14)


def test_directions_swap() -> None:
    a = Distribution.from_points([0, 1, 3], [0.2, 0.5, 0.3])
    b = Distribution.from_points([0, 2], [0.6, 0.4])
    ab, ba = audit(a, b, 1.3), audit(b, a, 1.3)
    assert ab.forward == pytest.approx(ba.reverse, rel=1e-14)
    assert ab.reverse == pytest.approx(ba.forward, rel=1e-14)


def test_no_overflow_with_large_values_and_small_theta() -> None:
    r = audit(Distribution.point(1e6), Distribution.point(1e6 + 1), 1e-3)
    assert r.loss == pytest.approx(1000.0, rel=1e-9)
    a = Distribution.from_points([0, 1e4], [0.5, 0.5])
    b = Distribution.from_points([0, 1e4], [0.4, 0.6])
    assert audit(a, b, 1e-6).loss == pytest.approx(math.log(0.5 / 0.4), rel=1e-12)
    assert math.isfinite(audit(a, Distribution.point(0), 1e-3).loss)


def test_theta_zero() -> None:
    a = Distribution.from_points([0, 1], [0.5, 0.5])
    b = Distribution.from_points([0, 1], [0.25, 0.75])
    r = audit(a, b, 0.0)
    assert r.forward == pytest.approx(math.log(2.0))
    assert r.reverse == pytest.approx(math.log(1.5))
    assert audit(a, Distribution.point(0), 0.0).loss == math.inf
    # zero-mass points do not count as support
    c = Distribution.from_points([0, 1, 2], [0.5, 0.5, 0.0])
    assert audit(a, c, 0.0).loss == 0.0


def test_identical_laws_lose_nothing() -> None:
    a = Distribution.from_points([0, 1, 4], [0.2, 0.3, 0.5])
    assert audit(a, a, 0.7).loss == pytest.approx(0.0, abs=1e-14)


@pytest.mark.parametrize("theta", (-1.0, float("nan"), float("inf")))
def test_bad_theta(theta: float) -> None:
    with pytest.raises(PufferfishInputError) as info:
        audit(Distribution.point(0), Distribution.point(1), theta)
    assert info.value.field == "theta"


@pytest.mark.parametrize("seed", range(6))
def test_large_pairs_match_dense_grid(seed: int) -> None:
    """Pairs above MATRIX_MAX_CELLS take the running log-sum path."""
    rng = np.random.default_rng(100 + seed)
    laws = []
    for _ in range(2):
        k = int(rng.integers(50, 90))
        xs = rng.choice(np.arange(-120, 121), size=k, replace=False)
        laws.append(Distribution.from_points(xs.tolist(), rng.dirichlet(np.ones(k)).tolist()))
    a, b = laws
    assert PairAuditor(a, b)._grid is not None
    theta = float(np.exp(rng.uniform(np.log(2), np.log(60))))
    forward, reverse = grid_loss(a, b, theta)
    result = audit(a, b, theta)
    assert result.forward == pytest.approx(forward, rel=1e-9, abs=1e-12)
    assert result.reverse == pytest.approx(reverse, rel=1e-9, abs=1e-12)


def test_large_pair_with_small_theta_matches_dense_grid() -> None:
    # span / theta above PREFIX_MAX_SPAN: the matrix path answers, still exactly
    rng = np.random.default_rng(7)
    k = 80
    a = Distribution.from_points(list(range(k)), rng.dirichlet(np.ones(k)).tolist())
    b = Distribution.from_points(list(range(1, k + 1)), rng.dirichlet(np.ones(k)).tolist())
    theta = 0.05
    forward, reverse = grid_loss(a, b, theta)
    result = audit(a, b, theta)
    assert result.forward == pytest.approx(forward, rel=1e-9)
    assert result.reverse == pytest.approx(reverse, rel=1e-9)
