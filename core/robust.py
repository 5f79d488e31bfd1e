"""Robust calibration over an L1 ball around a learned law (issue 15).

A learned group law P_hat is a DP estimate of the group's true law P. ``radius`` gives a public
r with Pr(|P - P_hat|_1 > r) <= beta (docs/privacy.md, "Robust calibration over an L1 ball");
``robust_exact`` gives the smallest theta whose exact two-sided loss is <= eps for every law in
the ball(s) (core.auditor robust mode). Everything here is a function of public quantities.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.stats import gamma

from core import _validate
from core._validate import FloatArray
from core.auditor import Balls, PairAuditor, ball_support, extreme_weights
from core.distribution import Distribution
from core.errors import PufferfishInputError
from core.kantorovich import MASS_TOL
from core.learning import SENSITIVITY, SHARE_UNITS, HistogramLearner
from core.policy import Calibration

WHOLE = 2.0  # L1 diameter of the simplex: a ball of radius >= 2 holds every law
_QUANTILE_SLACK = 1.0 + 1e-9  # scipy's Gamma quantile is accurate to ~1e-14; keep it valid


@dataclass(frozen=True, slots=True)
class Radius:
    """r: L1 radius around the published law (<= 2). void: the noisy mass is <= tail, so the
    data says nothing the floor does not (keep the previous law and radius). tail: the 1 - beta
    bound on the L1 norm of the noise, in users."""

    r: float
    void: bool
    tail: float


def noise_l1_tail(k: int, epsilon_learn: float, beta: float) -> float:
    """T (users) with Pr(|Z|_1 > T) <= beta for K bins of the learner's discrete Laplace noise.

    Each bin's |Z| (Pr[Z = z] ~ e^{-|z|/t} on the integers, t = 2/eps * 2**16 units) is
    stochastically below ceil(E) <= E + 1 with E ~ Exp(t): Pr(|Z| >= m) = 2 q^m / (1 + q) <=
    q^{m-1} = Pr(E > m - 1) for m >= 1, q = e^{-1/t}. So |Z|_1 <= Gamma(K, t) + K (coupling),
    and T = (t * Gamma(K, 1)^{-1}(1 - beta) + K) / 2**16.
    """
    kk = _bins(k)
    e = _validate.epsilon(epsilon_learn, "epsilon_learn")
    b = _validate.confidence_beta(beta)
    t_units: float = SENSITIVITY / e * SHARE_UNITS
    quantile: float = float(gamma.isf(b, kk)) * _QUANTILE_SLACK
    tail: float = (t_units * quantile + kk) / SHARE_UNITS
    return tail


def radius(noisy_mass: float, k: int, epsilon_learn: float, floor: float, beta: float) -> Radius:
    """Public L1 radius of a learned law (``HistogramLearner`` with these settings).

    On the event |Z|_1 <= T (probability >= 1 - beta), with h the true sums, c the clipped noisy
    bins, C = sum c >= noisy mass (clipping only raises bins) and H = sum h:
    |c/C - h/H|_1 <= |c - h|_1 / C + |C - H| / C <= 2 |Z|_1 / C <= 2 T / noisy_mass
    (|c_j - h_j| <= |Z_j| because h_j >= 0); the floor adds alpha |u - P|_1 <= 2 alpha (K-1)/K:
    r = (1 - alpha) min(2, 2 T / noisy_mass) + 2 alpha (K - 1) / K. void when noisy_mass <= T.
    """
    kk = _bins(k)
    mass = _validate.real(noisy_mass, "noisy_mass")
    alpha = _validate.probability(floor, "prior_floor")
    tail = noise_l1_tail(kk, epsilon_learn, beta)
    void = mass <= tail
    data = WHOLE if void else min(WHOLE, 2.0 * tail / mass)
    r = (1.0 - alpha) * data + 2.0 * alpha * (kk - 1) / kk
    return Radius(r=min(WHOLE, r), void=void, tail=tail)


def worst_case_theta(
    a: Distribution, b: Distribution, eps: float,
    radius_a: float = 0.0, radius_b: float = 0.0, domain: Sequence[float] | None = None,
) -> float:
    """max |x - x'| / eps over x, x' in the ball supports: passes the exact audit for every
    pair of laws there (Proposition 1: any coupling's spread is at most this). Over the domain
    this is Theorem 3 (max |t| / eps) for (P, delta_0) and the domain's span / eps for (P, Q)."""
    e = _validate.epsilon(eps)
    (ax, _), (bx, _) = Balls(radius_a, radius_b, domain).supports(a, b)
    return float(np.max(np.abs(ax[:, None] - bx[None, :]))) / e


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
) -> Calibration:
    """The smallest theta whose exact two-sided loss is <= eps for every A' in B(A, radius_a)
    and B' in B(B, radius_b) (laws on supp plus ``domain``).

    Radii 0: exactly ``core.calibrators.exact``. Every law's loss does not increase with
    theta, so neither does their sup: the same bracketing search, from the worst case above.
    A side is whole when its radius is >= 2 or its ball holds one point; when both are, theta
    is the worst case over the domain itself (no search), named so in ``theorem``.
    """
    from core.calibrators import _smallest_passing_theta, exact_theta

    e = _validate.epsilon(eps)
    balls = Balls(radius_a, radius_b, domain)
    ra, rb = balls.radius_a, balls.radius_b
    if not balls.robust:
        return Calibration(exact_theta(a, b, e), e, "exact", "priors", "exact audit (ERRATA)")
    (ax, _), (bx, _) = balls.supports(a, b)
    upper = worst_case_theta(a, b, e, ra, rb, domain)
    whole = (ra >= WHOLE or ax.size == 1) and (rb >= WHOLE or bx.size == 1)
    if whole:
        return Calibration(upper, e, "exact", "priors", "worst case over the domain (radius >= 2)")
    theorem = "exact audit over the L1 ball (issue 15)"
    auditor = PairAuditor(a, b, min(ra, WHOLE), min(rb, WHOLE), domain)
    if max(auditor.noiseless) <= e:
        return Calibration(0.0, e, "exact", "priors", theorem)
    return Calibration(_smallest_passing_theta(auditor, upper, e), e, "exact", "priors", theorem)


def worst_presence_law(
    law: Distribution, radius_law: float, domain: Sequence[float] | None = None
) -> Distribution:
    """The law in B(law, r) (on supp plus domain) with the most mass on large |x|: r/2 moved
    from the smallest |x| to the largest (maximises E[g(|X|)] for every increasing g)."""
    r = _validate.radius(radius_law, "radius")
    xs, ps = ball_support(law, r, domain)
    probs = extreme_weights(ps, r, np.abs(xs)[None, :], True)[0]
    return Distribution.from_points(xs.tolist(), (probs / probs.sum()).tolist())


def _bins(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or int(k) < 1:
        raise PufferfishInputError("k", f"must be an int >= 1, got {k!r}")
    return int(k)




RoundStatus = Literal["learned", "low_mass", "void"]


@dataclass(frozen=True, slots=True)
class RoundLaw:
    """One group's law after a learning round, with its public radius.

    status: "learned" (a new law and its radius), "low_mass" (noisy mass below learn_min_mass)
    or "void" (noisy mass <= the noise tail T: the radius bound says nothing) -- in both of
    the latter the previous law and radius are kept (docs/privacy.md, "Robust calibration over
    an L1 ball").
    """

    law: Distribution
    radius: float
    status: RoundStatus


def robust_round(
    learner: HistogramLearner,
    sums: Mapping[str, Sequence[int]],
    laws: Mapping[str, Distribution],
    radii: Mapping[str, float],
    beta: float,
) -> dict[str, RoundLaw]:
    """One learning round (``learner.draw``, charged epsilon_learn) plus each law's radius."""
    out: dict[str, RoundLaw] = {}
    k = len(learner.domain)
    for group, got in learner.draw(sums, laws).items():
        previous = RoundLaw(laws[group], radii.get(group, WHOLE), "low_mass")
        if got.kept:
            out[group] = previous
            continue
        bound = radius(got.noisy_mass, k, learner.epsilon_learn, learner.floor, beta)
        if bound.void:
            out[group] = RoundLaw(previous.law, previous.radius, "void")
        else:
            out[group] = RoundLaw(got.law, bound.r, "learned")
    return out
