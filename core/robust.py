"""Calibration for laws known up to an L1 ball around them (docs/privacy.md, "Robust
calibration over an L1 ball").

A learned group law is a DP estimate, published with a public radius (core.learning_radius).
Here: theta valid for every law within that radius. ``robust_exact`` is the smallest theta whose
exact two-sided loss is <= eps for every law in the ball(s) (core.auditor robust mode, searched
by core.exact_search); ``worst_case_theta`` and ``reach_spread`` are Proposition 1 over the
points and couplings the balls reach. eps is validated by the caller (core.policy.calibrate);
everything here is a function of public quantities.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pufferfish_core import validation
from pufferfish_core.auditor import WHOLE, Balls, PairAuditor, ball_support, extreme_weights
from pufferfish_core.distribution import Distribution
from pufferfish_core.exact_search import exact_theta, smallest_passing_theta
from pufferfish_core.kantorovich import MASS_TOL
from pufferfish_core.validation import FloatArray
from pufferfish_core.vocabulary import Derivation


def worst_case_theta(
    a: Distribution, b: Distribution, eps: float,
    radius_a: float = 0.0, radius_b: float = 0.0, domain: Sequence[float] | None = None,
) -> float:
    """max |x - x'| / eps over x, x' in the ball supports: passes the exact audit for every
    pair of laws there (Proposition 1: any coupling's spread is at most this). Over the domain
    this is Theorem 3 (max |t| / eps) for (P, delta_0) and the domain's span / eps for (P, Q)."""
    (ax, _), (bx, _) = Balls(radius_a, radius_b, domain).supports(a, b)
    return float(np.max(np.abs(ax[:, None] - bx[None, :]))) / eps


def reach_spread(
    a: Distribution, b: Distribution,
    radius_a: float = 0.0, radius_b: float = 0.0, domain: Sequence[float] | None = None,
) -> float:
    """sup of the monotone-plan spread (W_inf) over A' in B(A, r_A), B' in B(B, r_B).

    The quantile coupling pairs x with x' > x iff some level u has F_A'^{-1}(u) <= x and
    F_B'^{-1}(u) >= x', i.e. F_A'(x) > F_B'(x'-) (mass of B' below x'). Over the balls the two
    sides are independent: max F_A'(x) = min(1, F_A(x) + r_A/2) (mass moved down to x) and
    min F_B'(x'-) = max(0, F_B(x'-) - r_B/2) (mass moved up to x'), both attained. So the sup is
    the largest |x - x'| over reachable points passing that test, either way round (as in
    ``core.kantorovich.plan_spread``, a coupled mass <= MASS_TOL counts as none).
    """
    balls = Balls(radius_a, radius_b, domain)
    (ax, ap), (bx, bp) = balls.supports(a, b)
    ra, rb = min(balls.radius_a, WHOLE), min(balls.radius_b, WHOLE)
    return max(_one_way(ax, ap, ra, bx, bp, rb), _one_way(bx, bp, rb, ax, ap, ra))


def _one_way(
    ax: FloatArray, ap: FloatArray, ra: float, bx: FloatArray, bp: FloatArray, rb: float
) -> float:
    """Largest x' - x >= 0 with x in A's reach, x' in B's reach, coupled at some level."""
    top_a = np.minimum(np.cumsum(ap) + ra / 2.0, 1.0)
    low_b = np.maximum(np.cumsum(bp) - bp - rb / 2.0, 0.0)
    gaps = bx[None, :] - ax[:, None]
    ok = (top_a[:, None] - low_b[None, :] > MASS_TOL) & (gaps >= 0.0)
    return float(gaps[ok].max()) if ok.any() else 0.0


def robust_exact(
    a: Distribution, b: Distribution, eps: float,
    radius_a: float = 0.0, radius_b: float = 0.0, domain: Sequence[float] | None = None,
) -> Derivation:
    """The smallest theta whose exact two-sided loss is <= eps for every A' in B(A, radius_a)
    and B' in B(B, radius_b) (laws on supp plus ``domain``).

    Radii 0: exactly ``core.calibrators.exact``. Every law's loss does not increase with
    theta, so neither does their sup: the same bracketing search, from the worst case above.
    A side is whole when its radius is >= 2 or its ball holds one point; when both are, theta
    is the worst case over the domain itself (no search), named so in ``theorem``.
    """
    balls = Balls(radius_a, radius_b, domain)
    ra, rb = balls.radius_a, balls.radius_b
    if not balls.robust:
        return Derivation(exact_theta(a, b, eps), "exact audit (ERRATA)")
    (ax, _), (bx, _) = balls.supports(a, b)
    upper = worst_case_theta(a, b, eps, ra, rb, domain)
    whole = (ra >= WHOLE or ax.size == 1) and (rb >= WHOLE or bx.size == 1)
    if whole:
        return Derivation(upper, "worst case over the domain (radius >= 2)")
    theorem = "exact audit over the L1 ball"
    auditor = PairAuditor(a, b, min(ra, WHOLE), min(rb, WHOLE), domain)
    if max(auditor.noiseless) <= eps:
        return Derivation(0.0, theorem)
    return Derivation(smallest_passing_theta(auditor, upper, eps), theorem)


def worst_presence_law(
    law: Distribution, radius_law: float, domain: Sequence[float] | None = None
) -> Distribution:
    """The law in B(law, r) (on supp plus domain) with the most mass on large |x|: r/2 moved
    from the smallest |x| to the largest (maximises E[g(|X|)] for every increasing g)."""
    r = validation.radius(radius_law, "radius")
    xs, ps = ball_support(law, r, domain)
    probs = extreme_weights(ps, r, np.abs(xs)[None, :], True)[0]
    return Distribution.from_points(xs.tolist(), (probs / probs.sum()).tolist())
