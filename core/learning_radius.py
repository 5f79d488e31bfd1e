"""The public radius of a learned law (docs/privacy.md, "Robust calibration over an L1 ball").

A learned group law P_hat (core.learning) is a DP estimate of the group's true law P.
``radius`` gives a public r with Pr(|P - P_hat|_1 > r) <= beta from the learner's settings and
the noisy mass alone; ``robust_round`` is one learning round with each law's radius, as the
stream publishes it. The theta valid for every law within r is core.robust.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from scipy.special import gammainccinv

from pufferfish_core import validation
from pufferfish_core.auditor import WHOLE
from pufferfish_core.distribution import Distribution
from pufferfish_core.learning import SENSITIVITY, SHARE_UNITS, HistogramLearner

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
    kk = validation.bins(k)
    e = validation.epsilon(epsilon_learn, "epsilon_learn")
    b = validation.confidence_beta(beta)
    t_units: float = SENSITIVITY / e * SHARE_UNITS
    # the Gamma(K, 1) upper quantile: scipy.stats' gamma.isf is this call (scipy.special is a
    # third of scipy.stats' import time, paid by every worker and CLI start)
    quantile: float = float(gammainccinv(kk, b)) * _QUANTILE_SLACK
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
    kk = validation.bins(k)
    mass = validation.real(noisy_mass, "noisy_mass")
    alpha = validation.probability(floor, "prior_floor")
    tail = noise_l1_tail(kk, epsilon_learn, beta)
    void = mass <= tail
    data = WHOLE if void else min(WHOLE, 2.0 * tail / mass)
    r = (1.0 - alpha) * data + 2.0 * alpha * (kk - 1) / kk
    return Radius(r=min(WHOLE, r), void=void, tail=tail)


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
