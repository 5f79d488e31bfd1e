"""core/learning.py: users' normalised shares and the DP histogram learner.

Expected values are by hand (2**16 units, (1 - alpha) + alpha/K, the noise scale
2/epsilon_learn users) or from the closed-form discrete Laplace moments. Statistical tests
reject a correct implementation with probability about 1e-6 or less (bounds in each test).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.learning import (
    SHARE_UNITS,
    SHARES_COUNT_LIMIT,
    HistogramLearner,
    LearnedLaw,
    uniform,
    user_share,
    user_shares,
)

UNIT = 2**16
DOMAIN = (0.0, 1.0, 2.0)
COUNTS = st.lists(st.integers(0, 10_000), min_size=1, max_size=12)


# -- user_share ----------------------------------------------------------------------------
def test_share_units_is_two_to_the_16() -> None:
    assert SHARE_UNITS == 65_536


@settings(max_examples=200, deadline=None)
@given(COUNTS)
def test_user_share_sums_exactly_and_is_proportional(counts: list[int]) -> None:
    share = user_share(counts)
    assert len(share) == len(counts)
    assert all(isinstance(u, int) for u in share)
    total = sum(counts)
    if total == 0:
        assert share == (0,) * len(counts)
        return
    assert sum(share) == UNIT
    for c, u in zip(counts, share, strict=True):
        exact = Fraction(c * UNIT, total)
        assert abs(u - exact) < 1  # floor or ceiling of the exact share
        assert u >= 0
        if c == 0:
            assert u == 0
    # largest remainder: every bin rounded up has a remainder >= every bin rounded down
    rem = [Fraction(c * UNIT, total) - (c * UNIT // total) for c in counts]
    up = [r for r, c, u in zip(rem, counts, share, strict=True) if u > c * UNIT // total]
    down = [r for r, c, u in zip(rem, counts, share, strict=True) if u == c * UNIT // total]
    if up and down:
        assert min(up) >= max(down)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12).flatmap(lambda k: st.lists(
    st.lists(st.integers(0, 50), min_size=k, max_size=k).filter(any), min_size=1, max_size=20)))
def test_user_shares_is_user_share_row_by_row(rows: list[list[int]]) -> None:
    """The batch form: each row exactly as user_share (small counts make many tied
    remainders, where the index order decides)."""
    out = user_shares(np.array(rows, dtype=np.int64))
    assert out.dtype == np.int64 and out.shape == (len(rows), len(rows[0]))
    assert [tuple(r) for r in out.tolist()] == [user_share(r) for r in rows]


def test_user_shares_hand_values_and_refusals() -> None:
    got = user_shares(np.array([[1, 1, 1], [2, 1, 0], [0, 5, 0], [1, 2, 4]]))
    assert got.tolist() == [[21_846, 21_845, 21_845], [43_691, 21_845, 0], [0, UNIT, 0],
                            [9_362, 18_725, 37_449]]
    assert user_shares(np.zeros((0, 4), dtype=np.int64)).shape == (0, 4)
    big = SHARES_COUNT_LIMIT - 1
    assert user_shares(np.array([[big, 0]])).tolist() == [[UNIT, 0]]
    for bad in ([[0, 0]], [[-1, 2]], [[SHARES_COUNT_LIMIT, 1]], [[big, big]]):
        with pytest.raises(ValueError):
            user_shares(np.array(bad, dtype=np.int64))
    with pytest.raises(ValueError):
        user_shares(np.array([1, 2]))


def test_user_share_hand_values() -> None:
    assert user_share([1, 1]) == (32_768, 32_768)
    assert user_share([0, 5, 0]) == (0, UNIT, 0)
    assert user_share([3, 1]) == (49_152, 16_384)
    # thirds: 21845.33 each; the one unit left goes to the first (ties: lowest index)
    assert user_share([1, 1, 1]) == (21_846, 21_845, 21_845)
    # 2/3, 1/3: 43690.67 and 21845.33 -> the larger remainder gets the unit
    assert user_share([2, 1]) == (43_691, 21_845)
    assert user_share([1, 2]) == (21_845, 43_691)  # by remainder, not by position
    # sevenths: 9362.29 * (1, 2, 4) = 9362.29, 18724.57, 37449.14 -> floors sum 65535;
    # the largest remainder (.57, the middle bin) gets the unit
    assert user_share([1, 2, 4]) == (9_362, 18_725, 37_449)
    assert user_share([0, 0, 0]) == (0, 0, 0)
    assert user_share([]) == ()


@settings(max_examples=200, deadline=None)
@given(COUNTS, st.data())
def test_two_users_shares_differ_by_at_most_two_units_of_mass(
    counts: list[int], data: st.DataObject
) -> None:
    other = data.draw(st.lists(st.integers(0, 10_000), min_size=len(counts),
                               max_size=len(counts)))
    l1 = sum(abs(a - b) for a, b in zip(user_share(counts), user_share(other), strict=True))
    assert l1 <= 2 * UNIT  # a change of reports: L1 sensitivity 2 (in users)
    assert sum(user_share(counts)) <= UNIT  # a join/leave: L1 at most 1


# -- HistogramLearner: validation ----------------------------------------------------------
@pytest.mark.parametrize("eps", [0.0, -0.1, math.nan, math.inf])
def test_learner_refuses_bad_epsilon(eps: float) -> None:
    with pytest.raises(PufferfishInputError) as info:
        HistogramLearner(DOMAIN, eps, 0.05, 10)
    assert info.value.field == "epsilon_learn"


@pytest.mark.parametrize("floor", [-0.01, 1.01, math.nan, 2.0])
def test_learner_refuses_bad_floor(floor: float) -> None:
    with pytest.raises(PufferfishInputError) as info:
        HistogramLearner(DOMAIN, 0.1, floor, 10)
    assert info.value.field == "prior_floor"


@pytest.mark.parametrize("min_mass", [math.nan, math.inf, -math.inf])
def test_learner_refuses_non_finite_min_mass(min_mass: float) -> None:
    with pytest.raises(PufferfishInputError) as info:
        HistogramLearner(DOMAIN, 0.1, 0.05, min_mass)
    assert info.value.field == "learn_min_mass"


def test_learner_accepts_floor_bounds() -> None:
    for floor in (0.0, 1.0):
        assert HistogramLearner(DOMAIN, 0.1, floor, 10).floor == floor


def test_charge_and_scale_units_by_hand() -> None:
    assert HistogramLearner(DOMAIN, 0.1, 0.05, 10).charge() == 0.1
    # scale = (2 / epsilon_learn) users = 2/eps * 2**16 units
    assert HistogramLearner(DOMAIN, 1.0, 0.05, 10).scale_units == Fraction(131_072)
    assert HistogramLearner(DOMAIN, 0.5, 0.05, 10).scale_units == Fraction(262_144)
    assert HistogramLearner(DOMAIN, 0.25, 0.05, 10).scale_units == Fraction(524_288)
    assert HistogramLearner(DOMAIN, 2.0, 0.05, 10).scale_units == Fraction(65_536)
    for eps in (0.1, 0.3, 0.7):
        want = Fraction(2) / Fraction(eps) * 2**16
        assert HistogramLearner(DOMAIN, eps, 0.05, 10).scale_units == want
        assert math.isclose(float(want), 2 / eps * 65_536, rel_tol=1e-15)


def test_uniform() -> None:
    u = uniform(DOMAIN)
    assert u.support == DOMAIN
    assert all(math.isclose(p, 1 / 3, rel_tol=1e-15) for p in u.probs)


# -- HistogramLearner: draw ----------------------------------------------------------------
PREV = {"g1": Distribution.from_points(list(DOMAIN), [0.6, 0.3, 0.1]),
        "g2": Distribution.from_points(list(DOMAIN), [0.2, 0.3, 0.5]),
        "empty": uniform(DOMAIN)}


def test_draw_returns_a_law_for_every_configured_group() -> None:
    learner = HistogramLearner(DOMAIN, 1.0, 0.05, 10)
    sums = {"g1": [0, 500 * UNIT, 0], "stray": [UNIT, 0, 0]}  # "stray" is not configured
    out = learner.draw(sums, PREV)
    assert set(out) == set(PREV)
    for got in out.values():
        assert isinstance(got, LearnedLaw)
        assert got.law.support == DOMAIN
        assert math.isclose(sum(got.law.probs), 1.0, rel_tol=1e-12)
    assert out["g1"].kept is False  # 500 users, noise of a few users


def test_zero_mass_groups_keep_their_previous_law() -> None:
    # Noisy mass = sum of 3 discrete Laplace draws of scale 2 users; Pr(>= 50 users) is
    # about e^{-25} * 25^2 / 16 ~ 5e-10 per group, so 60 groups fail with p < 1e-7.
    learner = HistogramLearner(DOMAIN, 1.0, 0.05, 50)
    prev = {f"g{i}": PREV["g1"] for i in range(60)}
    out = learner.draw({}, prev)
    assert set(out) == set(prev)
    for got in out.values():
        assert got.kept and got.law == PREV["g1"]
        assert got.noisy_mass < 50


def test_zero_mass_groups_get_noise_when_min_mass_is_zero() -> None:
    # With min_mass 0 a zero-mass group is learned whenever its noisy mass is > 0
    # (probability ~1/2); all 40 kept has probability ~2^-40.
    learner = HistogramLearner(DOMAIN, 1.0, 0.05, 0.0)
    out = learner.draw({}, {f"g{i}": PREV["g1"] for i in range(40)})
    kept = [got.kept for got in out.values()]
    assert any(kept) and not all(kept)
    for got in out.values():
        assert got.kept == (got.noisy_mass <= 0)
        if not got.kept:  # noise only: every learned law still has the floor
            assert min(got.law.probs) >= 0.05 / 3 * (1 - 1e-12)


def test_large_group_learns_its_values() -> None:
    # 10_000 users all reporting 1 on (0, 1, 2): the noise (scale 2 users per bin) moves the
    # estimate by ~1e-3 at most with overwhelming probability (50 users: Pr ~ e^{-25}).
    # min_mass 100: the empty group's noisy mass (3 bins of scale 2) passes it with Pr < e^{-40}
    # (a min_mass of 10 was passed by noise alone in a few % of runs).
    alpha = 0.05
    learner = HistogramLearner(DOMAIN, 1.0, alpha, 100)
    sums = {"big": [0, 10_000 * UNIT, 0]}
    prev = {"big": uniform(DOMAIN), "other": PREV["g2"]}
    out = learner.draw(sums, prev)
    big = out["big"]
    assert not big.kept
    assert abs(big.noisy_mass - 10_000) < 150
    assert math.isclose(big.law.prob(1.0), (1 - alpha) + alpha / 3, abs_tol=0.005)
    assert math.isclose(big.law.prob(0.0), alpha / 3, abs_tol=0.005)
    assert big.law.prob(0.0) >= alpha / 3 * (1 - 1e-12)
    assert big.law.prob(2.0) >= alpha / 3 * (1 - 1e-12)
    assert out["other"].kept and out["other"].law == PREV["g2"]


@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.5, 1.0])
def test_floor_gives_every_point_alpha_over_k(alpha: float) -> None:
    domain = (0.0, 1.0, 2.0, 3.0, 5.0)
    learner = HistogramLearner(domain, 1.0, alpha, 10)
    sums = {"g": [0, 0, 30_000 * UNIT, 10_000 * UNIT, 0]}
    got = learner.draw(sums, {"g": uniform(domain)})["g"]
    assert not got.kept
    assert all(p >= alpha / 5 * (1 - 1e-12) for p in got.law.probs)
    # by hand: 3/4 and 1/4 of the (1 - alpha) part; 0.005 needs ~200 users of noise (e^-100)
    assert math.isclose(got.law.prob(2.0), (1 - alpha) * 0.75 + alpha / 5, abs_tol=0.005)
    assert math.isclose(got.law.prob(3.0), (1 - alpha) * 0.25 + alpha / 5, abs_tol=0.005)
    if alpha == 1.0:
        assert all(math.isclose(p, 0.2, rel_tol=1e-12) for p in got.law.probs)


def test_below_min_mass_keeps_even_with_data() -> None:
    # 5 users, min_mass 1000: the noisy mass (5 +- a few users) is far below the threshold.
    learner = HistogramLearner(DOMAIN, 1.0, 0.05, 1000)
    got = learner.draw({"g": [0, 5 * UNIT, 0]}, {"g": PREV["g2"]})["g"]
    assert got.kept and got.law == PREV["g2"]
    assert abs(got.noisy_mass - 5) < 150


def discrete_laplace_moments(scale: float) -> tuple[float, float]:
    """(E|Z|, Var Z) of Pr[Z = z] ∝ r^|z|, r = e^{-1/scale}: 2r/(1-r^2), 2r/(1-r)^2."""
    r = math.exp(-1 / scale)
    one_minus_r = -math.expm1(-1 / scale)
    return 2 * r / (one_minus_r * (1 + r)), 2 * r / one_minus_r**2


def bin_noise(learner: HistogramLearner, groups: int, rounds: int) -> np.ndarray:
    """The noise added to each group's sum (exact: noisy_mass * 2**16 is an integer)."""
    prev = {f"g{i:04d}": uniform(learner.domain) for i in range(groups)}
    out = []
    for _ in range(rounds):
        for got in learner.draw({}, prev).values():
            units = got.noisy_mass * UNIT
            assert units == round(units)
            out.append(units)
    return np.array(out)


@pytest.mark.parametrize("eps", [1.0, 0.5])
def test_noise_per_bin_has_scale_two_over_epsilon(eps: float) -> None:
    # One bin: the noisy mass is exactly one bin's noise. n = 2000 draws.
    # E|Z| for scale s = 2/eps * 2**16 units; |Z| ~ geometric with sd ~ s: 6 standard errors
    # (p ~ 1e-8). A scale of 1/eps (half) or 4/eps (double) is off by ~50%: 11+ errors.
    learner = HistogramLearner((0.0,), eps, 0.05, -1e9)
    scale = 2 / eps * UNIT
    z = bin_noise(learner, 400, 5)
    n = z.size
    mean_abs, var = discrete_laplace_moments(scale)
    assert abs(np.abs(z).mean() - mean_abs) < 6 * scale / math.sqrt(n)
    assert abs(z.mean()) < 6 * math.sqrt(var / n)
    assert abs(z.var() - var) < 8 * var * math.sqrt(5 / n)  # Laplace kurtosis 6


def test_every_bin_gets_noise() -> None:
    # Four bins: the noisy mass carries four independent draws, variance 4 Var Z.
    # Sum of 4 Laplace: kurtosis 3 + 3/4; sample variance sd ~ v sqrt(2.75 / n).
    learner = HistogramLearner((0.0, 1.0, 2.0, 3.0), 1.0, 0.05, -1e9)
    z = bin_noise(learner, 500, 2)
    _, var = discrete_laplace_moments(2 * UNIT)
    want = 4 * var
    assert abs(z.var() - want) < 8 * want * math.sqrt(2.75 / z.size)


def test_scale_units_sample_agrees_with_formula() -> None:
    # Cross-check via the sampler with the learner's own scale (brief item): mean |Z|.
    from pufferfish_core.noise import sample_discrete_laplace

    learner = HistogramLearner(DOMAIN, 1.0, 0.05, 10)
    n = 2000
    z = np.array([sample_discrete_laplace(learner.scale_units) for _ in range(n)], dtype=float)
    mean_abs, _ = discrete_laplace_moments(131_072)
    assert abs(np.abs(z).mean() - mean_abs) < 6 * 131_072 / math.sqrt(n)
