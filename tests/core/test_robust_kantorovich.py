"""Robust Kantorovich theta (issue 25): the largest W_inf (monotone plan) spread over every pair
of laws in the L1 balls, / eps -- not the span of the points the balls reach.

Expected values never come from the code under test: one joint LP per pair of points
(scipy.optimize.linprog over both balls at once) decides whether the two points can be coupled
by some pair of laws in the balls; the LP's laws are the witnesses, whose spread is recomputed
here from the definition of the quantile coupling; the plain and robust exact audits
(core.auditor) check the witnesses and the balls at that theta; hand values for uniform laws.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution
from pufferfish_core.kantorovich import plan_spread
from pufferfish_core.plan import release_plan
from pufferfish_core.policy import calibrate
from pufferfish_core.robust import worst_case_theta
from pufferfish_core.vocabulary import PairKind, Rule

SLACK = 1 + 1e-9
LP_TOL = 1e-9  # a coupled level interval shorter than this counts as none
DC, VC = PairKind.DISTRIBUTION_CHANGE, PairKind.VALUE_CHANGE
CASES = 24


def joint_lp(a: np.ndarray, ra: float, b: np.ndarray, rb: float, below: np.ndarray,
             strictly_below: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """max over A' in B(a, ra), B' in B(b, rb) of A'(below) - B'(strictly_below), one LP.

    Variables [p, s, q, t]: s >= |p - a|, sum s <= ra, and the same for (q, t, b, rb)."""
    k = a.size
    n = 4 * k
    c = np.zeros(n)
    c[:k] = -below
    c[2 * k:3 * k] = strictly_below
    rows, rhs = [], []
    for off, centre in ((0, a), (2 * k, b)):
        for i in range(k):
            up = np.zeros(n)
            up[off + i], up[off + k + i] = 1.0, -1.0
            down = np.zeros(n)
            down[off + i], down[off + k + i] = -1.0, -1.0
            rows += [up, down]
            rhs += [centre[i], -centre[i]]
    for off, r in ((0, ra), (2 * k, rb)):
        total = np.zeros(n)
        total[off + k:off + 2 * k] = 1.0
        rows.append(total)
        rhs.append(r)
    eq = np.zeros((2, n))
    eq[0, :k] = 1.0
    eq[1, 2 * k:3 * k] = 1.0
    res = linprog(c, A_ub=np.array(rows), b_ub=rhs, A_eq=eq, b_eq=[1.0, 1.0],
                  bounds=[(0, None)] * n, method="highs",
                  options={"primal_feasibility_tolerance": 1e-10,
                           "dual_feasibility_tolerance": 1e-10})
    assert res.status == 0
    return -float(res.fun), res.x[:k], res.x[2 * k:3 * k]


def lp_reach(dom: list[float], a: np.ndarray, ra: float, b: np.ndarray, rb: float
             ) -> tuple[float, np.ndarray, np.ndarray]:
    """Largest x' - x (either way round) that some A', B' in the balls couple, with witnesses.

    The quantile coupling pairs a point <= x of the lower law with a point >= x' of the upper
    law iff some level u has F_low^{-1}(u) <= x and F_up^{-1}(u) >= x', i.e. iff the level
    interval (F_up(x'-), F_low(x)] is non-empty: the LP's optimum is > 0."""
    xs = np.array(dom)
    best, wa, wb = 0.0, a, b
    for x in dom:
        for x2 in dom:
            if x2 <= x:
                continue
            for lower_is_a in (True, False):
                lo, rlo, hi, rhi = (a, ra, b, rb) if lower_is_a else (b, rb, a, ra)
                value, p, q = joint_lp(lo, rlo, hi, rhi, (xs <= x).astype(float),
                                       (xs < x2).astype(float))
                if value > LP_TOL and x2 - x > best:
                    best = x2 - x
                    wa, wb = (p, q) if lower_is_a else (q, p)
    return best, wa, wb


def coupling_spread(xs: np.ndarray, p: np.ndarray, q: np.ndarray) -> float:
    """max |x - x'| over the quantile coupling's cells (eq. piStar), from its definition."""
    f, g = np.cumsum(p / p.sum()), np.cumsum(q / q.sum())
    levels = np.unique(np.concatenate(([0.0], f, g, [1.0])))
    out = 0.0
    for lo, hi in zip(levels[:-1], levels[1:], strict=True):
        if hi - lo <= LP_TOL:
            continue
        u = 0.5 * (lo + hi)
        i = min(int(np.searchsorted(f, u)), xs.size - 1)
        j = min(int(np.searchsorted(g, u)), xs.size - 1)
        out = max(out, abs(float(xs[i] - xs[j])))
    return out


def law(dom: list[float], probs: np.ndarray) -> Distribution:
    return Distribution.from_points(dom, (probs / probs.sum()).tolist())


def random_case(seed: int) -> tuple[PairKind | None, list[float], np.ndarray, float,
                                     np.ndarray, float, float]:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(3, 7))
    dom = sorted(float(x) for x in rng.choice(np.arange(-6, 10), size=k, replace=False))
    kind = (None, DC, VC)[seed % 3]
    if kind is VC:  # two point masses of the domain
        i, j = rng.choice(k, size=2, replace=False)
        a, b = np.eye(k)[i], np.eye(k)[j]
    else:
        a, b = rng.dirichlet(np.ones(k)), rng.dirichlet(np.ones(k))
        a[rng.random(k) < 0.25] = 0.0  # some domain points outside the support
        a = a / a.sum() if a.sum() > 0 else np.eye(k)[0]
    ra = float(rng.uniform(0.01, 1.2))
    rb = (ra, 0.0, float(rng.uniform(0.01, 1.2)))[seed % 4 % 3]
    eps = float(rng.choice([0.3, 1.0, 2.0]))
    return kind, dom, a, ra, b, rb, eps


@pytest.mark.parametrize("seed", range(CASES))
def test_robust_kantorovich_theta_is_the_lp_reachable_spread_over_eps(seed: int) -> None:
    kind, dom, a, ra, b, rb, eps = random_case(seed)
    spread, wa, wb = lp_reach(dom, a, ra, b, rb)
    got = calibrate(kind, Rule.KANTOROVICH, law(dom, a), law(dom, b), eps, radii=(ra, rb),
                    domain=dom)
    assert got.theta == pytest.approx(spread / eps, rel=1e-12, abs=1e-12)
    # never above the span of the reachable points (the theta before issue 25)
    assert got.theta <= worst_case_theta(law(dom, a), law(dom, b), eps, ra, rb, dom) * SLACK

    # the LP's laws are in the balls and their coupling spread is the reachable spread: any
    # theta below spread / eps charges them spread / theta > eps (0.999 theta: eps / 0.999)
    assert np.abs(wa - a).sum() <= ra + 1e-8 and np.abs(wb - b).sum() <= rb + 1e-8
    witness = coupling_spread(np.array(dom), wa, wb)
    assert witness == pytest.approx(spread, rel=1e-12, abs=1e-12)
    assert plan_spread(law(dom, wa), law(dom, wb)) == pytest.approx(witness, abs=1e-12)
    assert witness / (0.999 * got.theta) > eps * 1.0009

    # at theta: the exact two-sided audit passes for the witnesses and over the whole balls
    assert audit(law(dom, wa), law(dom, wb), got.theta).loss <= eps * SLACK
    assert audit(law(dom, a), law(dom, b), got.theta, ra, rb, dom).loss <= eps * SLACK


@pytest.mark.parametrize("seed", [s for s in range(CASES) if s % 3 == 1])
def test_the_release_plan_charges_exactly_eps_at_the_robust_kantorovich_theta(seed: int) -> None:
    _, dom, a, ra, b, rb, eps = random_case(seed)
    spread, _, _ = lp_reach(dom, a, ra, b, rb)
    plan = release_plan({"g": law(dom, a), "h": law(dom, b)}, [DC], Rule.KANTOROVICH, eps, -10,
                        {"g": ra, "h": rb}, dom)
    # both groups' balls are paired both ways; the spread is symmetric, so ra = rb is not needed
    assert plan.theta == pytest.approx(spread / eps, rel=1e-12)
    assert plan.charge() == pytest.approx(eps, rel=1e-12)


@pytest.mark.parametrize(("r", "reach"), [(0.1, 1.0), (0.2, 2.0), (0.35, 3.0), (0.6, 4.0),
                                          (0.7, 5.0), (2.0, 5.0)])
def test_uniform_hand_values(r: float, reach: float) -> None:
    """U = uniform on {0..5}, both balls radius r: F_A'(x) <= (x+1)/6 + r/2 and
    F_B'(x'-) >= x'/6 - r/2, so x < x' are coupled iff x' - x < 1 + 6 r: reach =
    min(5, ceil(1 + 6 r) - 1). The span is 5 for every r > 0 (the review's theta 5 vs 3 at
    r = 0.35, eps = 1)."""
    dom = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    u = np.full(6, 1 / 6)
    got = calibrate(None, Rule.KANTOROVICH, law(dom, u), law(dom, u), 1.0, radii=(r, r),
                    domain=dom)
    assert got.theta == reach
    assert lp_reach(dom, u, r, u, r)[0] == reach
    assert worst_case_theta(law(dom, u), law(dom, u), 1.0, r, r, dom) == 5.0


def test_the_random_cases_include_reachable_spreads_below_the_span() -> None:
    """The cases above are not all ones where the span was already the answer."""
    below = 0
    for seed in range(CASES):
        _, dom, a, ra, b, rb, _ = random_case(seed)
        span = worst_case_theta(law(dom, a), law(dom, b), 1.0, ra, rb, dom)
        below += lp_reach(dom, a, ra, b, rb)[0] < span
    assert below >= 5
