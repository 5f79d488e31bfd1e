"""Noise calibrators: one function per theorem of the paper, plus the exact user-local rule.

Each returns a ``Calibration``; theta = 0 means the pair needs no noise.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq

from core import _validate
from core._validate import FloatArray
from core.auditor import PairAuditor
from core.distribution import Distribution
from core.kantorovich import plan_spread
from core.policy import Calibration

_BRENT_RTOL = 4.0 * float(np.finfo(np.float64).eps)


def value_change(a: float, b: float, eps: float) -> Calibration:
    """Theorem 1 (S_{a,b}): theta = |a - b| / eps."""
    e = _validate.epsilon(eps)
    diff = abs(_validate.real(a, "a") - _validate.real(b, "b"))
    return Calibration(diff / e, e, "bound", "value_change", "Theorem 1")


def value_presence(a: float, eps: float) -> Calibration:
    """Theorem 2 (S_{a,perp}): theta = |a| / eps."""
    e = _validate.epsilon(eps)
    return Calibration(abs(_validate.real(a, "a")) / e, e, "bound", "value_presence", "Theorem 2")


def distribution_presence_bound(p: Distribution, eps: float) -> Calibration:
    """Theorem 3, eq. (SuffCondSPperp) (S_{P,perp}): theta = max_{t in supp P} |t| / eps."""
    e = _validate.epsilon(eps)
    xs, _ = p.positive_arrays()
    return Calibration(
        float(np.abs(xs).max()) / e, e, "bound", "distribution_presence", "Theorem 3 (max|t|)"
    )


def distribution_presence_relaxed(p: Distribution, eps: float) -> Calibration:
    """Theorem 3, eq. (SuffCondSPperpRelax): the theta with E_P[e^{|D|/theta}] = e^eps.

    Solved by Brent's method. Bracket: by Jensen E[e^{|D|/theta}] >= e^{E|D|/theta}, so the
    root is >= E|D|/eps; and E[e^{|D|/theta}] <= e^{max|D|/theta}, so it is <= max|D|/eps.
    """
    e = _validate.epsilon(eps)
    xs, ps = p.positive_arrays()
    mags = np.abs(xs)
    top = float(mags.max())
    if top == 0.0:
        return Calibration(0.0, e, "relaxed", "distribution_presence", "Theorem 3 (relaxed)")
    logp = np.log(ps)

    def excess(theta: float) -> float:
        m = mags / theta + logp
        peak = float(m.max())
        return peak + math.log(float(np.exp(m - peak).sum())) - e

    lo, hi = float(mags @ ps) / e, top / e
    if excess(hi) >= 0.0:  # one support magnitude only: the bound is the root
        root = hi
    elif excess(lo) <= 0.0:  # Jensen is (numerically) tight
        root = lo
    else:
        root = float(brentq(excess, lo, hi, xtol=1e-300, rtol=_BRENT_RTOL, maxiter=200))
    return Calibration(root, e, "relaxed", "distribution_presence", "Theorem 3 (relaxed)")


def distribution_presence_bernoulli(p: float, eps: float) -> Calibration:
    """Theorem 3 relaxed for D ~ Bernoulli(p), eq. (SuffCondSPperpRelaxBinary):
    theta = 1 / log((e^eps - (1 - p)) / p); p = 0 means D = 0 always, so theta = 0."""
    e = _validate.epsilon(eps)
    prob = _validate.probability(p, "p")
    if prob == 0.0:
        theta = 0.0
    else:
        theta = 1.0 / (math.log(math.expm1(e) + prob) - math.log(prob))
    return Calibration(theta, e, "relaxed", "distribution_presence", "Theorem 3 (Bernoulli)")


def distribution_change_thm4(p: Distribution, q: Distribution, eps: float) -> Calibration:
    """Theorem 4 (S_{P,Q}): theta = sup_t Delta*(t) / eps on user i's own P and Q.

    sup_t Delta*(t) on the lattice equals the spread of the monotone plan of (P, Q).
    """
    e = _validate.epsilon(eps)
    return Calibration(plan_spread(p, q) / e, e, "bound", "distribution_change", "Theorem 4")


def distribution_change_binary(p: Distribution, q: Distribution, eps: float) -> Calibration:
    """Lemma SuffCondSPQBinary (S_{P,Q}, Bernoulli P and Q): theta = 1 / eps."""
    e = _validate.epsilon(eps)
    p.bernoulli_p()
    q.bernoulli_p()
    return Calibration(1.0 / e, e, "bound", "distribution_change", "Lemma SuffCondSPQBinary")


def distribution_change_binary_relaxed(
    p: Distribution, q: Distribution, rest: Distribution, eps: float
) -> Calibration:
    """Lemma SuffCondSPQBinaryRelax as corrected (ERRATA 1-3), Bernoulli P, Q.

    With R = law of f(D_{-i}) on the integers, the monotone plan of the two priors of X puts,
    for p < q, mass pi*(x'-1, x') = (q-p) R(x'-1) and pi*(x', x') = p R(x'-1) + (1-q) R(x')
    in column x', and for p > q mass pi*(x'+1, x') = (p-q) R(x') and
    pi*(x', x') = q R(x'-1) + (1-p) R(x'). The column condition (RelaxSuff) gives
    theta = 1 / log(e^eps + (e^eps - 1) min_x' psi(x')), psi = pi*(x',x') / pi*(x'-+1, x'),
    over every x' of the alphabet of X with a shifted mass, including the ends where R
    vanishes (psi = p/(q-p) for p < q, (1-p)/(p-q) for p > q). p = q: no noise.
    """
    e = _validate.epsilon(eps)
    pp, qq = p.bernoulli_p(), q.bernoulli_p()
    rx, rp = rest.positive_arrays()
    _validate.integer_lattice(rx, "rest")
    rule, theorem = "relaxed", "Lemma SuffCondSPQBinaryRelax (corrected)"
    if pp == qq:
        return Calibration(0.0, e, rule, "distribution_change", theorem)
    columns = np.union1d(rx, rx + 1.0)  # every x' where a shifted mass can sit
    below, here = _mass_at(rx, rp, columns - 1.0), _mass_at(rx, rp, columns)
    if pp < qq:
        shifted = (qq - pp) * below
        stay = pp * below + (1.0 - qq) * here
    else:
        shifted = (pp - qq) * here
        stay = qq * below + (1.0 - pp) * here
    psi = float(np.min(stay[shifted > 0.0] / shifted[shifted > 0.0]))
    theta = 1.0 / math.log(math.exp(e) + math.expm1(e) * psi)
    return Calibration(theta, e, rule, "distribution_change", theorem)


def _mass_at(xs: FloatArray, ps: FloatArray, at: FloatArray) -> FloatArray:
    """Pr(X = at) for a law with sorted support xs (0 off the support)."""
    k = np.minimum(np.searchsorted(xs, at), xs.size - 1)
    return np.where(xs[k] == at, ps[k], 0.0)


def kantorovich(a: Distribution, b: Distribution, eps: float) -> Calibration:
    """Proposition 1 / Proposition ComputePiStar on two priors of X: sup|x - x'| / eps."""
    e = _validate.epsilon(eps)
    return Calibration(plan_spread(a, b) / e, e, "kantorovich", "priors", "Proposition 1")


def exact(a: Distribution, b: Distribution, eps: float) -> Calibration:
    """The smallest theta whose exact two-sided loss on (A, B) is <= eps (ERRATA, last section).

    Applied to user i's own pair it is valid for every population (a mixture ratio with equal
    weights is at most its largest component ratio). The loss does not increase with theta
    (for t < theta, Lap_theta = Lap_t * K with K = (t/theta)^2 delta_0 + (1 - (t/theta)^2)
    Lap_theta, compare characteristic functions; post-processing cannot raise the loss),
    and plan_spread/eps passes (Proposition 1), so: bracket the crossing of log-loss with
    log eps in log-theta, then shrink the bracket (false position with bisection
    safeguard). The returned theta is the passing end of a bracket narrower than 5e-10 in
    log-theta, so it passes and is within 1e-6 (relative) of the infimum. If even theta -> 0
    passes (ERRATA 12), theta = 0: right for this pair alone, the release takes the max.
    """
    e = _validate.epsilon(eps)
    return Calibration(exact_theta(a, b, e), e, "exact", "priors", "exact audit (ERRATA)")


def exact_theta(a: Distribution, b: Distribution, eps: float, spread: float | None = None) -> float:
    """``exact(a, b, eps).theta`` for a validated eps; pass ``plan_spread(a, b)`` if known."""
    auditor = PairAuditor(a, b)
    if max(auditor.noiseless) <= eps:
        return 0.0
    upper = (plan_spread(a, b) if spread is None else spread) / eps
    return _smallest_passing_theta(auditor, upper, eps)


_LOG_WIDTH = 5e-10


def _smallest_passing_theta(auditor: PairAuditor, upper: float, eps: float) -> float:
    log_eps = math.log(eps)

    def excess_at(loss: float) -> float:
        return math.log(max(loss, 1e-300)) - log_eps

    def excess(u: float) -> tuple[float, float]:
        theta = math.exp(u)
        return excess_at(auditor.loss(theta)), theta

    theta_hi, loss_hi = _passing_upper(auditor, upper, eps)
    u_hi, g_hi = math.log(theta_hi), excess_at(loss_hi)
    if g_hi == 0.0:
        return theta_hi
    # Step down assuming loss ~ 1/theta (slope -1 in log-log); widen while it still passes.
    step = min(g_hi * 1.05, -_LOG_WIDTH)
    for _ in range(4000):
        u_lo = u_hi + step
        g_lo, theta = excess(u_lo)
        if g_lo > 0.0:
            break
        u_hi, g_hi, theta_hi, step = u_lo, g_lo, theta, step * 2.0
    else:  # pragma: no cover - the loss tends to the noiseless loss > eps as theta -> 0
        raise ArithmeticError("exact: no failing lower bracket found")
    # False position, nudged 0.4 bracket-tolerances towards the end that did not move last,
    # so that once the estimate is sharp the probe lands just across the crossing and closes
    # the bracket; bisection when one end has stalled.
    same_side = 0
    for _ in range(300):
        width = u_hi - u_lo
        if width <= _LOG_WIDTH:
            break
        if abs(same_side) >= 4:
            u, same_side = 0.5 * (u_lo + u_hi), 0
        else:
            nudge = -0.4 * _LOG_WIDTH if same_side > 0 else 0.4 * _LOG_WIDTH
            u = u_hi - g_hi * width / (g_hi - g_lo) + nudge
            u = min(max(u, u_lo + 0.1 * _LOG_WIDTH), u_hi - 0.1 * _LOG_WIDTH)
        g, theta = excess(u)
        if g > 0.0:
            u_lo, g_lo = u, g
            same_side = min(same_side, 0) - 1
        else:
            u_hi, g_hi, theta_hi = u, g, theta
            same_side = max(same_side, 0) + 1
    return theta_hi  # evaluated and passing (exp(log(theta)) need not round-trip)


def _passing_upper(auditor: PairAuditor, theta: float, eps: float) -> tuple[float, float]:
    """(theta, its loss), theta nudged up until the audit passes (rounding at a tight bound)."""
    for step in range(200):
        loss = auditor.loss(theta)
        if loss <= eps:
            return theta, loss
        theta *= 1.0 + 1e-12 * 4.0**step
    raise ArithmeticError("exact: no passing upper bracket found")  # pragma: no cover
