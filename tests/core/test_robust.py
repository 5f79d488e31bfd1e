"""Robust calibration over an L1 ball: core.robust, core.auditor robust mode, core.policy
robust entries, core.plan radii.

Expected values never come from the code under test: a brute force (dense grid of y plus an LP
over each ball with scipy.optimize.linprog), the plain exact audit of laws drawn inside the
balls, and hand formulas (Theorems 1-3, the domain's span).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from pufferfish_core.auditor import audit, extreme_weights
from pufferfish_core.calibrators import exact
from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.kantorovich import plan_spread
from pufferfish_core.plan import release_plan
from pufferfish_core.policy import TABLE, calibrate
from pufferfish_core.robust import reach_spread, robust_exact, worst_presence_law
from pufferfish_core.vocabulary import PairKind, Rule

FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLACK = 1 + 1e-9
ZERO = Distribution.point(0.0)
DP, DC = PairKind.DISTRIBUTION_PRESENCE, PairKind.DISTRIBUTION_CHANGE
VC, VP = PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE


# -- independent brute force ----------------------------------------------------------------
def lp_extreme(center: np.ndarray, r: float, coef: np.ndarray, maximise: bool) -> float:
    """max (or min) coef . p over {p >= 0, sum p = 1, |p - center|_1 <= r} by an LP."""
    return float(coef @ lp_argextreme(center, r, coef, maximise))


def lp_argextreme(
    center: np.ndarray, r: float, coef: np.ndarray, maximise: bool
) -> np.ndarray:
    """A law in the ball maximising (minimising) coef . p, by linprog."""
    k = center.size
    c = np.concatenate([-coef if maximise else coef, np.zeros(k)])
    rows, rhs = [], []
    for i in range(k):  # s_i >= |p_i - center_i|
        up = np.zeros(2 * k)
        up[i], up[k + i] = 1.0, -1.0
        down = np.zeros(2 * k)
        down[i], down[k + i] = -1.0, -1.0
        rows += [up, down]
        rhs += [center[i], -center[i]]
    rows.append(np.concatenate([np.zeros(k), np.ones(k)]))
    rhs.append(r)
    eq = np.concatenate([np.ones(k), np.zeros(k)])[None, :]
    res = linprog(c, A_ub=np.array(rows), b_ub=rhs, A_eq=eq, b_eq=[1.0],
                  bounds=[(0, None)] * (2 * k), method="highs",
                  options={"primal_feasibility_tolerance": 1e-10,
                           "dual_feasibility_tolerance": 1e-10})
    assert res.status == 0
    return np.clip(res.x[:k], 0.0, None)  # type: ignore[no-any-return]


def brute_robust_loss(
    xa: list[float], pa: list[float], ra: float,
    xb: list[float], pb: list[float], rb: float, theta: float,
) -> float:
    """sup over a dense y grid (with every support point and far tails) of the LP ratio."""
    ax, bx = np.array(xa), np.array(xb)
    lo, hi = min(xa + xb), max(xa + xb)
    ys = np.concatenate([np.linspace(lo - 3 * theta, hi + 3 * theta, 61), ax, bx])
    best = -math.inf
    for y in ys:
        near = min(np.abs(y - ax).min(), np.abs(y - bx).min())  # same scale on both: ratio kept
        ca = np.exp(-(np.abs(y - ax) - near) / theta)
        cb = np.exp(-(np.abs(y - bx) - near) / theta)
        num = lp_extreme(np.array(pa), ra, ca, True)
        den = lp_extreme(np.array(pb), rb, cb, False)
        best = max(best, math.log(num / den))
        num = lp_extreme(np.array(pb), rb, cb, True)
        den = lp_extreme(np.array(pa), ra, ca, False)
        best = max(best, math.log(num / den))
    return best


def small_law(draw: st.DrawFn, domain: list[float]) -> Distribution:
    weights = draw(st.lists(st.integers(1, 20), min_size=len(domain), max_size=len(domain)))
    return Distribution.from_counts(domain, weights)


@st.composite
def ball_pair(draw: st.DrawFn) -> tuple[list[float], Distribution, float, Distribution, float]:
    domain = sorted(draw(st.sets(st.integers(-6, 9), min_size=2, max_size=4)))
    dom = [float(x) for x in domain]
    a, b = small_law(draw, dom), small_law(draw, dom)
    ra = draw(st.sampled_from([0.0, 0.05, 0.3, 1.0, 1.9]))
    rb = draw(st.sampled_from([0.0, 0.1, 0.5]))
    return dom, a, ra, b, rb


# -- the greedy vertices equal the LP -------------------------------------------------------
@FAST
@given(ball_pair(), st.floats(0.15, 2.0))
def test_robust_audit_matches_lp_brute_force(
    case: tuple[list[float], Distribution, float, Distribution, float], scale: float
) -> None:
    """theta a fraction of the span: the LP solver's tolerances (1e-10) need coefficients
    e^{-|y-x|/theta} no smaller than ~e^{-7} to resolve the ratio to 1e-6."""
    dom, a, ra, b, rb = case
    theta = scale * (max(dom) - min(dom))
    got = audit(a, b, theta, ra, rb, dom).loss
    want = brute_robust_loss(dom, list(a.probs), ra, dom, list(b.probs), rb, theta)
    assert got == pytest.approx(want, rel=1e-6, abs=1e-7)


def test_robust_audit_presence_with_point_mass_matches_lp() -> None:
    p = Distribution.from_points([-2, 1, 3], [0.5, 0.3, 0.2])
    for r in (0.02, 0.4, 1.5):
        got = audit(p, ZERO, 1.7, r, 0.0, [-2, 0, 1, 3]).loss
        want = brute_robust_loss([-2, 0, 1, 3], [0.5, 0, 0.3, 0.2], r, [0.0], [1.0], 0.0, 1.7)
        assert got == pytest.approx(want, rel=1e-6, abs=1e-7)


@FAST
@given(st.lists(st.floats(0.01, 1.0), min_size=2, max_size=6), st.floats(0.0, 2.5),
       st.lists(st.floats(-3, 3), min_size=6, max_size=6), st.booleans())
def test_extreme_weights_is_the_lp_optimum(
    weights: list[float], r: float, coef: list[float], top: bool
) -> None:
    p = np.array(weights) / sum(weights)
    c = np.array(coef[: p.size])
    got = extreme_weights(p, r, c[None, :], top)[0]
    assert got.min() >= 0 and got.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.abs(got - p).sum() <= min(r, 2.0) + 1e-12
    assert float(got @ c) == pytest.approx(lp_extreme(p, min(r, 2.0), c, top), abs=1e-8)


# -- robust theta ----------------------------------------------------------------------------
def inside(center: Distribution, r: float, rng: np.random.Generator, dom: list[float]) -> list[
    Distribution
]:
    """Random laws in B(center, r) on dom (convex combinations towards random laws, and
    towards every vertex), plus the greedy vertices at every point."""
    ps = np.array([center.prob(x) for x in dom])
    out = []
    targets = [rng.dirichlet(np.ones(len(dom))) for _ in range(6)] + list(np.eye(len(dom)))
    for target in targets:
        dist = np.abs(target - ps).sum()
        t = 1.0 if dist <= r else r / dist
        q = ps + t * (target - ps)
        out.append(Distribution.from_points(dom, (q / q.sum()).tolist()))
    order = -np.abs(np.array(dom)[:, None] - np.array(dom)[None, :])
    for top in (True, False):
        for row in extreme_weights(ps, r, order, top):
            out.append(Distribution.from_points(dom, (row / row.sum()).tolist()))
    return out


@FAST
@given(ball_pair(), st.sampled_from([0.3, 1.0, 2.0]), st.integers(0, 2**32 - 1))
def test_robust_theta_passes_for_laws_in_the_balls_and_is_tight(
    case: tuple[list[float], Distribution, float, Distribution, float], eps: float, seed: int
) -> None:
    dom, a, ra, b, rb = case
    rng = np.random.default_rng(seed)
    theta = robust_exact(a, b, eps, ra, rb, dom).theta
    span = max(dom) - min(dom)
    assert theta <= span / eps * SLACK  # Theorem 4 / Prop 1 over the domain
    assert theta >= exact(a, b, eps).theta / SLACK
    for a2 in inside(a, ra, rng, dom)[:12]:
        for b2 in inside(b, rb, rng, dom)[:6]:
            assert audit(a2, b2, theta).loss <= eps * SLACK
    if theta > 0 and (ra > 0 or rb > 0):  # just below, some law in the balls fails (LP)
        worse = brute_robust_loss(dom, list(a.probs), ra, dom, list(b.probs), rb, theta * 0.999)
        assert worse > eps


@FAST
@given(st.sets(st.integers(-9, 9), min_size=2, max_size=5), st.floats(0.0, 2.0),
       st.sampled_from([0.5, 1.0]), st.integers(0, 2**32 - 1))
def test_robust_presence_passes_inside_and_stays_below_theorem_3(
    points: set[int], r: float, eps: float, seed: int
) -> None:
    dom = sorted(float(x) for x in points | {0})
    rng = np.random.default_rng(seed)
    center = Distribution.from_counts(dom, rng.integers(1, 9, len(dom)).tolist())
    theta = robust_exact(center, ZERO, eps, r, 0.0, dom).theta
    assert theta <= max(abs(x) for x in dom) / eps * SLACK  # Theorem 3 over the domain
    for law in inside(center, r, rng, dom):
        assert audit(law, ZERO, theta).loss <= eps * SLACK


def test_radius_zero_is_exactly_the_exact_rule() -> None:
    p = Distribution.from_points([0, 1, 2], [0.6, 0.3, 0.1])
    q = Distribution.from_points([0, 1, 2], [0.2, 0.3, 0.5])
    for a, b in ((p, ZERO), (p, q), (q, p)):
        assert robust_exact(a, b, 0.5, 0.0, 0.0, [0, 1, 2]).theta == exact(a, b, 0.5).theta
        assert calibrate(DC, Rule.EXACT, a, b, 0.5, radii=(0.0, 0.0)) == calibrate(
            DC, Rule.EXACT, a, b, 0.5
        )
        # the robust path with a vanishing radius converges to the plain exact theta
        tiny = robust_exact(a, b, 0.5, 1e-13, 1e-13, [0, 1, 2]).theta
        assert tiny == pytest.approx(exact(a, b, 0.5).theta, rel=1e-6)


def test_radius_two_or_more_is_the_worst_case_over_the_domain() -> None:
    p = Distribution.from_points([-3, 1, 4], [0.2, 0.5, 0.3])
    q = Distribution.from_points([-3, 1, 4], [0.6, 0.2, 0.2])
    dom = [-3, 0, 1, 4, 6]
    got = robust_exact(p, ZERO, 0.5, 2.0, 0.0, dom)
    assert got.theta == 6 / 0.5 and "worst case" in got.theorem  # Theorem 3 over the domain
    assert robust_exact(p, ZERO, 0.5, 7.5, 0.0, dom).theta == 12.0
    assert robust_exact(p, q, 0.5, 2.0, 3.0, dom).theta == 9 / 0.5  # span of the domain / eps
    # just inside the whole simplex the search lands on the same worst case
    near = robust_exact(p, ZERO, 0.5, 1.999999, 0.0, dom).theta
    assert 11.9 < near <= 12.0 * SLACK


def test_worst_presence_law_maximises_the_relaxed_theta() -> None:
    p = Distribution.from_points([0, 1, 5], [0.5, 0.4, 0.1])
    worst = worst_presence_law(p, 0.3, [0, 1, 2, 5])
    assert worst.probs == pytest.approx((0.35, 0.4, 0.0, 0.25))  # 0.15 from |0| to |5|
    got = calibrate(DP, Rule.RELAXED, p, ZERO, 1.0, radii=(0.3, 0.0), domain=[0, 1, 2, 5])
    # E_P[e^{|D|/theta}] = e^eps for the worst law, and <= for every law in the ball
    rng = np.random.default_rng(5)
    for law in inside(p, 0.3, rng, [0, 1, 2, 5]):
        xs, ps = law.arrays()
        assert float(ps @ np.exp(np.abs(xs) / got.theta)) <= math.exp(1.0) * SLACK
    xs, ps = worst.arrays()
    assert float(ps @ np.exp(np.abs(xs) / got.theta)) == pytest.approx(math.e, rel=1e-9)


# -- the spread over the balls (composition charge) --------------------------------------------
def lp_witness_spread(dom: list[float], a: Distribution, ra: float, b: Distribution, rb: float
                      ) -> float:
    """Largest plan_spread over LP witnesses: for each x < x' (either way round) the A-law
    maximising F(x) and the B-law minimising F(x'-), spread by core.kantorovich."""
    xs, pa, pb = np.array(dom), np.array(a.probs), np.array(b.probs)
    best = 0.0
    for i, x in enumerate(dom):
        for j, x2 in enumerate(dom):
            if i == j:
                continue
            lo_p, lo_r, hi_p, hi_r = (pa, ra, pb, rb) if x < x2 else (pb, rb, pa, ra)
            left, right = min(x, x2), max(x, x2)
            first = lp_argextreme(lo_p, lo_r, (xs <= left).astype(float), True)
            second = lp_argextreme(hi_p, hi_r, (xs < right).astype(float), False)
            d1 = Distribution.from_points(dom, (first / first.sum()).tolist())
            d2 = Distribution.from_points(dom, (second / second.sum()).tolist())
            best = max(best, plan_spread(d1, d2))
    return best


@FAST
@given(ball_pair(), st.integers(0, 2**32 - 1))
def test_reach_spread_is_the_sup_of_the_plan_spread_over_the_balls(
    case: tuple[list[float], Distribution, float, Distribution, float], seed: int
) -> None:
    dom, a, ra, b, rb = case
    got = reach_spread(a, b, ra, rb, dom)
    rng = np.random.default_rng(seed)
    for a2 in inside(a, ra, rng, dom)[:10]:  # valid: at least every law pair's spread
        for b2 in inside(b, rb, rng, dom)[:10]:
            assert plan_spread(a2, b2) <= got
    assert got == lp_witness_spread(dom, a, ra, b, rb)  # attained by LP witnesses


def test_reach_spread_hand_values() -> None:
    p = Distribution.from_points([0, 1, 2, 3], [0.1, 0.4, 0.4, 0.1])
    dom = [0.0, 1.0, 2.0, 3.0]
    # same law: 0 without radii; r = .1 each couples 0 with 1 (F(0) <= .15 > F(1-) >= .05),
    # not 0 with 2 (.15 < .45); r = .5: 0 with 2 (.35 > .25), not 0 with 3 (.35 < .65)
    assert reach_spread(p, p) == 0.0
    assert reach_spread(p, p, 0.1, 0.1, dom) == 1.0
    assert reach_spread(p, p, 0.5, 0.5, dom) == 2.0
    assert lp_witness_spread(dom, p, 0.1, p, 0.1) == 1.0
    assert lp_witness_spread(dom, p, 0.5, p, 0.5) == 2.0
    assert reach_spread(p, ZERO, 0.01, 0.0, [-4, *dom]) == 4.0  # Theorem 3 on the reach


# -- policy ------------------------------------------------------------------------------------
def test_every_table_entry_has_a_robust_mode_that_covers_the_ball() -> None:
    dom = [0.0, 1.0]  # Bernoulli laws, so the binary entries apply too
    p, q = Distribution.bernoulli(0.3), Distribution.bernoulli(0.6)
    for kind, how in TABLE:
        a, b = (Distribution.point(1.0), ZERO) if kind in (VC, VP) else (p, q)
        if kind is DP:
            b = ZERO
        got = calibrate(kind, how, a, b, 1.0, radii=(0.2, 0.2 if kind is DC else 0.0),
                        domain=dom)
        assert got.rule == how.value and got.pair == kind.value
        assert got.theta >= calibrate(kind, how, a, b, 1.0).theta / SLACK
        assert got.theta <= 1.0 * SLACK  # span of {0, 1} / eps
        if kind in (DP, DC):
            for a2 in inside(a, 0.2, np.random.default_rng(1), dom):
                assert audit(a2, b, got.theta).loss <= 1.0 * SLACK


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, "0.1", True])
def test_bad_radius_is_refused(bad: object) -> None:
    p = Distribution.bernoulli(0.3)
    with pytest.raises(PufferfishInputError) as info:
        calibrate(DP, Rule.EXACT, p, ZERO, 1.0, radii=(bad, 0.0))  # type: ignore[arg-type]
    assert info.value.field == "radius"
    with pytest.raises(PufferfishInputError) as info:
        robust_exact(p, ZERO, 1.0, bad, 0.0)  # type: ignore[arg-type]
    assert info.value.field == "radius_a"
    with pytest.raises(PufferfishInputError):
        release_plan({"g": p}, [DP], Rule.EXACT, 1.0, -10, {"g": bad})  # type: ignore[dict-item]


# -- plan --------------------------------------------------------------------------------------
def test_plan_without_radii_is_unchanged_and_zero_radii_too() -> None:
    laws = {"a": Distribution.from_points([0, 1, 2], [0.6, 0.3, 0.1]),
            "b": Distribution.from_points([0, 1, 2], [0.2, 0.3, 0.5])}
    kinds = list(PairKind)
    plain = release_plan(laws, kinds, Rule.EXACT, 0.5, -10)
    assert release_plan(laws, kinds, Rule.EXACT, 0.5, -10, {"a": 0.0, "b": 0.0}) == plain
    assert release_plan(laws, kinds, Rule.EXACT, 0.5, -10, None) == plain


def test_plan_with_radii_covers_the_ball_and_the_domain() -> None:
    laws = {"a": Distribution.from_points([0, 1, 2], [0.6, 0.4, 0.0]),
            "b": Distribution.from_points([0, 1, 2], [0.6, 0.4, 0.0])}
    dom = [0.0, 1.0, 2.0, 5.0]
    kinds = list(PairKind)
    plan = release_plan(laws, kinds, Rule.EXACT, 0.5, -10, {"a": 0.1}, dom)
    row = plan.groups["a"]
    assert row[VC] == 5 / 0.5 and row[VP] == 5 / 0.5  # Theorems 1, 2 on the reachable domain
    assert plan.groups["b"][VC] == 1 / 0.5  # b has radius 0: its own support only
    # equal published laws are no longer skipped: a's ball differs from b's law
    assert row[DC] > 0.0 and plan.groups["b"][DC] == row[DC]
    rng = np.random.default_rng(3)
    for law in inside(laws["a"], 0.1, rng, dom):
        assert audit(law, ZERO, plan.theta).loss <= 0.5 * SLACK
        assert audit(law, laws["b"], plan.theta).loss <= 0.5 * SLACK
        assert audit(laws["b"], law, plan.theta).loss <= 0.5 * SLACK
    assert plan.spread == 5.0  # |5 - 0| reachable in a's ball (presence)
    change = release_plan(laws, [DC], Rule.EXACT, 0.5, -10, {"a": 0.1}, dom)
    # a' puts <= .05 at 5 (F(2) >= .95); b's F(1-) = .6 < .95 + ... couples 1 with 5? no:
    # the pair (x in b, x' in a') needs F_b(x) > F_a'(x'-) >= .95: only x = 1 (F = 1.0 > .95)
    assert change.spread == 4.0
    # the default domain is the union of the supports (zero-probability points included)
    default = release_plan(laws, [VC], Rule.EXACT, 0.5, -10, {"a": 0.1})
    assert default.groups["a"][VC] == 2 / 0.5


def test_plan_refuses_radii_of_unknown_groups() -> None:
    with pytest.raises(PufferfishInputError) as info:
        release_plan({"a": ZERO}, [DP], Rule.EXACT, 1.0, -10, {"zz": 0.1})
    assert info.value.field == "radii"
