"""core/composition.py: the exact loss of T releases of one persistent value.

The theorem under test says the sup over y in R^T sits on the diagonal and equals the
one-release loss at theta / T. The expected values here never come from core/: a dense grid of
output vectors in R^T (T = 1, 2, 3), an enumeration of every output multiset of support points
(larger T), and closed forms by hand.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.special import logsumexp

from pufferfish_core.composition import combined_scale, persistent_audit, tfold_loss
from pufferfish_core.distribution import Distribution, point_zero
from pufferfish_core.errors import PufferfishInputError
from tests.oracles import grid_loss

Law = tuple[list[float], list[float]]


def law(support: list[float], probs: list[float]) -> Distribution:
    return Distribution.from_points(support, probs)


def log_lik(ys: np.ndarray, xs: np.ndarray, ps: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """log sum_x p(x) prod_t e^{-|y_t - x| / theta_t} for every row of ys (constants dropped)."""
    dist = (np.abs(ys[:, :, None] - xs[None, None, :]) / thetas[None, :, None]).sum(axis=1)
    return logsumexp(-dist, b=ps, axis=1)  # type: ignore[no-any-return]


def grid_sup(a: Law, b: Law, thetas: list[float], step: float) -> tuple[float, float]:
    """(forward, reverse) sup over a cubic grid of y in R^T, one unit beyond both supports."""
    ax, ap = np.array(a[0], float), np.array(a[1], float)
    bx, bp = np.array(b[0], float), np.array(b[1], float)
    lo = min(ax.min(), bx.min()) - 1.0
    hi = max(ax.max(), bx.max()) + 1.0
    axis = np.arange(lo, hi + step / 2, step)
    ys = np.array(list(itertools.product(axis, repeat=len(thetas))))
    th = np.array(thetas, float)
    diff = log_lik(ys, ax, ap, th) - log_lik(ys, bx, bp, th)
    return float(diff.max()), float(-diff.min())


def multiset_sup(a: Law, b: Law, theta: float, releases: int) -> float:
    """max over every multiset of T outputs drawn from the support points (not the diagonal)."""
    ax, ap = np.array(a[0], float), np.array(a[1], float)
    bx, bp = np.array(b[0], float), np.array(b[1], float)
    points = np.union1d(ax, bx)
    ys = np.array(list(itertools.combinations_with_replacement(points, releases)))
    th = np.full(releases, theta)
    diff = log_lik(ys, ax, ap, th) - log_lik(ys, bx, bp, th)
    return float(np.abs(diff).max())


# Small laws: presence with support on both sides of 0, a change pair with different supports,
# two Bernoulli laws, and a pair with non-integer points.
CASES: dict[str, tuple[Law, Law, float]] = {
    "presence_two_sided": (([-2.0, 1.0, 2.0], [0.3, 0.5, 0.2]), ([0.0], [1.0]), 1.3),
    "change_disjoint": (([0.0, 2.0], [0.7, 0.3]), ([1.0, 3.0], [0.4, 0.6]), 0.8),
    "bernoulli": (([0.0, 1.0], [0.8, 0.2]), ([0.0, 1.0], [0.1, 0.9]), 0.6),
    "middle_heavy": (([-1.0, 0.0, 1.0], [0.1, 0.8, 0.1]), ([-1.0, 0.0, 1.0], [0.45, 0.1, 0.45]),
                     0.5),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize(("releases", "step"), [(1, 0.01), (2, 0.01), (3, 0.1)])
def test_matches_a_dense_grid_of_outputs(name: str, releases: int, step: float) -> None:
    a, b, theta = CASES[name]
    forward, reverse = grid_sup(a, b, [theta] * releases, step)
    got = tfold_loss(law(*a), law(*b), theta, releases)
    # the grid holds every (integer) support point, so its sup is the exact sup
    assert got == pytest.approx(max(forward, reverse), abs=1e-9)


def test_off_grid_points_bound_the_grid_within_its_lipschitz_slack() -> None:
    # support points not on the grid: the grid sup is below the exact sup, by at most the
    # log-ratio's Lipschitz constant 2 sum_t 1/theta_t times half a step (L1 distance).
    a, b, theta, step = ([0.13, 1.71], [0.35, 0.65]), ([0.0, 0.94], [0.8, 0.2]), 0.7, 0.02
    forward, reverse = grid_sup(a, b, [theta, theta], step)
    got = tfold_loss(law(*a), law(*b), theta, 2)
    assert max(forward, reverse) <= got + 1e-9
    assert max(forward, reverse) >= got - 2 * (2 / theta) * step / 2


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("releases", [4, 6, 9])
def test_matches_every_multiset_of_support_points(name: str, releases: int) -> None:
    a, b, theta = CASES[name]
    expected = multiset_sup(a, b, theta, releases)
    assert tfold_loss(law(*a), law(*b), theta, releases) == pytest.approx(expected, abs=1e-9)


def test_random_laws_against_every_multiset() -> None:
    rng = np.random.default_rng(13)
    for _ in range(40):
        pool = np.sort(rng.normal(size=6) * 2)
        ka, kb = rng.integers(1, 4, size=2)
        ax, bx = np.sort(rng.choice(pool, ka, False)), np.sort(rng.choice(pool, kb, False))
        ap, bp = rng.dirichlet(np.full(ka, 0.5)), rng.dirichlet(np.full(kb, 0.5))
        ap, bp = (ap + 1e-3) / (ap + 1e-3).sum(), (bp + 1e-3) / (bp + 1e-3).sum()
        theta, releases = float(np.exp(rng.uniform(-1, 1))), int(rng.integers(2, 7))
        a, b = (ax.tolist(), ap.tolist()), (bx.tolist(), bp.tolist())
        expected = multiset_sup(a, b, theta, releases)
        assert tfold_loss(law(*a), law(*b), theta, releases) == pytest.approx(expected, abs=1e-9)


def test_one_release_is_the_one_release_loss() -> None:
    a, b, theta = CASES["presence_two_sided"]
    expected = grid_loss({"support": a[0], "probs": a[1]}, {"support": b[0], "probs": b[1]}, theta)
    assert tfold_loss(law(*a), law(*b), theta, 1) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("releases", [1, 2, 10, 100])
def test_value_pair_is_linear_in_t(releases: int) -> None:
    # point masses: every output's ratio is e^{(|y - b| - |y - a|)/theta} <= e^{|a - b|/theta}
    got = tfold_loss(Distribution.point(5.0), Distribution.point(3.0), 4.0, releases)
    assert got == pytest.approx(releases * 2 / 4.0, rel=1e-12)


@pytest.mark.parametrize("releases", [1, 2, 10, 100])
def test_presence_with_non_negative_support_is_the_moment_generating_function(
    releases: int,
) -> None:
    # P_4 of the paper vs delta_0 at the exact theta of eps = 1 (docs/privacy.md): forward =
    # log E e^{T X / theta} (right tail), reverse = -log E e^{-T X / theta} (left tail).
    xs, ps, theta = [1.0, 2.0, 4.0, 5.0], [0.4, 0.1, 0.1, 0.4], 3.4698
    pairs = list(zip(xs, ps, strict=True))
    forward = math.log(math.fsum(p * math.exp(releases * x / theta) for x, p in pairs))
    reverse = -math.log(math.fsum(p * math.exp(-releases * x / theta) for x, p in pairs))
    got = tfold_loss(law(xs, ps), point_zero(), theta, releases)
    assert got == pytest.approx(max(forward, reverse), rel=1e-12)
    if releases == 2:
        assert got == pytest.approx(2.2161, abs=1e-4)  # the figure quoted in docs/privacy.md


def test_bernoulli_pair_saturates_at_the_noiseless_loss() -> None:
    # Bernoulli(0.2) vs (0.9): the ratio is monotone in the output, ends at (0.8 + 0.2 u) /
    # (0.1 + 0.9 u), u = e^{-T/theta}, and (0.1 + 0.9 v) / (0.8 + 0.2 v), v = e^{T/theta}
    theta = 0.691
    for releases in (1, 3, 50):
        u, v = math.exp(-releases / theta), math.exp(releases / theta)
        expected = max(math.log((0.8 + 0.2 * u) / (0.1 + 0.9 * u)),
                       math.log((0.1 + 0.9 * v) / (0.8 + 0.2 * v)))
        got = tfold_loss(Distribution.bernoulli(0.2), Distribution.bernoulli(0.9), theta, releases)
        assert got == pytest.approx(expected, rel=1e-12)
        assert got <= math.log(8.0) + 1e-12


def test_no_noise_repeats_the_one_release_loss() -> None:
    bern = Distribution.bernoulli
    for releases in (1, 7):
        assert tfold_loss(bern(0.2), bern(0.9), 0.0, releases) == pytest.approx(math.log(8.0))
        assert tfold_loss(Distribution.point(1.0), point_zero(), 0.0, releases) == math.inf


def test_varying_scales_match_a_grid() -> None:
    a, b = ([-2.0, 1.0, 2.0], [0.3, 0.5, 0.2]), ([0.0], [1.0])
    forward, reverse = grid_sup(a, b, [0.8, 2.5], 0.01)
    got = persistent_audit(law(*a), law(*b), [0.8, 2.5])
    assert got.forward == pytest.approx(forward, abs=1e-9)
    assert got.reverse == pytest.approx(reverse, abs=1e-9)
    assert combined_scale([0.8, 2.5]) == pytest.approx(1 / (1 / 0.8 + 1 / 2.5), rel=1e-15)
    assert combined_scale([0.8, 0.0]) == 0.0


def test_iid_values_cost_more_than_a_persistent_one() -> None:
    # The counterexample of docs/privacy.md: i.i.d. Bernoulli reports, three releases. The
    # product law's loss (a grid over R^3, nothing from core/) is far above the persistent
    # value's loss, which never exceeds log 8 = 2.079.
    theta = 0.691
    a, b = ([0.0, 1.0], [0.8, 0.2]), ([0.0, 1.0], [0.1, 0.9])
    axis = np.arange(-1.0, 2.0 + 1e-9, 0.05)
    ys = np.array(list(itertools.product(axis, repeat=3)))
    th = np.array([theta])
    per = {
        name: np.sum([log_lik(ys[:, [t]], np.array(xs), np.array(ps), th) for t in range(3)],
                     axis=0)
        for name, (xs, ps) in (("a", a), ("b", b))
    }
    iid = float(np.abs(per["a"] - per["b"]).max())
    persistent = tfold_loss(law(*a), law(*b), theta, 3)
    assert persistent < math.log(8.0) < 2.5 < iid


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", 10**7])
def test_bad_release_count(bad: object) -> None:
    with pytest.raises(PufferfishInputError) as info:
        tfold_loss(point_zero(), Distribution.point(1.0), 1.0, bad)  # type: ignore[arg-type]
    assert info.value.field == "releases"


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "1"])
def test_bad_theta(bad: object) -> None:
    with pytest.raises(PufferfishInputError) as info:
        tfold_loss(point_zero(), Distribution.point(1.0), bad, 2)  # type: ignore[arg-type]
    assert info.value.field == "theta"


@pytest.mark.parametrize("bad", [[], "ab", None, [1.0, -1.0], [1.0, math.nan]])
def test_bad_scales(bad: object) -> None:
    with pytest.raises(PufferfishInputError) as info:
        persistent_audit(point_zero(), Distribution.point(1.0), bad)  # type: ignore[arg-type]
    assert info.value.field == "thetas"
