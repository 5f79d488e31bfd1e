"""Noise calibrators: one function per theorem of the paper, plus the exact user-local rule.

Each returns a ``Derivation``: theta (0 means the pair needs no noise) and the theorem it comes
from; core.policy.calibrate dispatches to them and builds the ``Calibration``. Applied to a
user's own pair, each is valid for every population (docs/privacy.md, "User-local
calibration"); the paper's statements as corrected are docs/errata.md. epsilon and the values
are validated where they enter (core.policy.calibrate), not here; a calibrator refuses only the
laws its theorem does not cover (the binary Lemmas: Bernoulli laws, a rest on the integers).
"""

from __future__ import annotations

import math

import numpy as np

from pufferfish_core import validation
from pufferfish_core.distribution import Distribution
from pufferfish_core.exact_search import exact_theta
from pufferfish_core.kantorovich import plan_spread
from pufferfish_core.validation import FloatArray
from pufferfish_core.vocabulary import Derivation

_BRENT_RTOL = 4.0 * float(np.finfo(np.float64).eps)


def value_change(a: float, b: float, eps: float) -> Derivation:
    """Theorem 1 (S_{a,b}): theta = |a - b| / eps."""
    return Derivation(abs(float(a) - float(b)) / eps, "Theorem 1")


def value_presence(a: float, eps: float) -> Derivation:
    """Theorem 2 (S_{a,perp}): theta = |a| / eps."""
    return Derivation(abs(float(a)) / eps, "Theorem 2")


def distribution_presence_bound(p: Distribution, eps: float) -> Derivation:
    """Theorem 3, eq. (SuffCondSPperp) (S_{P,perp}): theta = max_{t in supp P} |t| / eps."""
    xs, _ = p.positive_arrays()
    return Derivation(float(np.abs(xs).max()) / eps, "Theorem 3 (max|t|)")


def distribution_presence_relaxed(p: Distribution, eps: float) -> Derivation:
    """Theorem 3, eq. (SuffCondSPperpRelax): the theta with E_P[e^{|D|/theta}] = e^eps.

    Solved by Brent's method. Bracket: by Jensen E[e^{|D|/theta}] >= e^{E|D|/theta}, so the
    root is >= E|D|/eps; and E[e^{|D|/theta}] <= e^{max|D|/theta}, so it is <= max|D|/eps.
    """
    theorem = "Theorem 3 (relaxed)"
    xs, ps = p.positive_arrays()
    mags = np.abs(xs)
    top = float(mags.max())
    if top == 0.0:
        return Derivation(0.0, theorem)
    logp = np.log(ps)

    def excess(theta: float) -> float:
        m = mags / theta + logp
        peak = float(m.max())
        return peak + math.log(float(np.exp(m - peak).sum())) - eps

    lo, hi = float(mags @ ps) / eps, top / eps
    if excess(hi) >= 0.0:  # one support magnitude only: the bound is the root
        root = hi
    elif excess(lo) <= 0.0:  # Jensen is (numerically) tight
        root = lo
    else:
        # imported here: scipy.optimize costs every worker and CLI start ~0.7 CPU-s otherwise
        from scipy.optimize import brentq

        root = float(brentq(excess, lo, hi, xtol=1e-300, rtol=_BRENT_RTOL, maxiter=200))
    return Derivation(root, theorem)


def distribution_presence_bernoulli(p: float, eps: float) -> Derivation:
    """Theorem 3 relaxed for D ~ Bernoulli(p), eq. (SuffCondSPperpRelaxBinary):
    theta = 1 / log((e^eps - (1 - p)) / p); p = 0 means D = 0 always, so theta = 0."""
    if p == 0.0:
        theta = 0.0
    else:
        theta = 1.0 / (math.log(math.expm1(eps) + p) - math.log(p))
    return Derivation(theta, "Theorem 3 (Bernoulli)")


def distribution_change_thm4(p: Distribution, q: Distribution, eps: float) -> Derivation:
    """Theorem 4 (S_{P,Q}): theta = sup_t Delta*(t) / eps on user i's own P and Q.

    sup_t Delta*(t) on the lattice equals the spread of the monotone plan of (P, Q).
    """
    return Derivation(plan_spread(p, q) / eps, "Theorem 4")


def distribution_change_binary(p: Distribution, q: Distribution, eps: float) -> Derivation:
    """Lemma SuffCondSPQBinary (S_{P,Q}, Bernoulli P and Q): theta = 1 / eps."""
    p.bernoulli_p()
    q.bernoulli_p()
    return Derivation(1.0 / eps, "Lemma SuffCondSPQBinary")


def distribution_change_binary_relaxed(
    p: Distribution, q: Distribution, rest: Distribution, eps: float
) -> Derivation:
    """Lemma SuffCondSPQBinaryRelax as corrected (ERRATA 1-3), Bernoulli P, Q.

    With R = law of f(D_{-i}) on the integers, the monotone plan of the two priors of X puts,
    for p < q, mass pi*(x'-1, x') = (q-p) R(x'-1) and pi*(x', x') = p R(x'-1) + (1-q) R(x')
    in column x', and for p > q mass pi*(x'+1, x') = (p-q) R(x') and
    pi*(x', x') = q R(x'-1) + (1-p) R(x'). The column condition (RelaxSuff) gives
    theta = 1 / log(e^eps + (e^eps - 1) min_x' psi(x')), psi = pi*(x',x') / pi*(x'-+1, x'),
    over every x' of the alphabet of X with a shifted mass, including the ends where R
    vanishes (psi = p/(q-p) for p < q, (1-p)/(p-q) for p > q). p = q: no noise.
    """
    pp, qq = p.bernoulli_p(), q.bernoulli_p()
    rx, rp = rest.positive_arrays()
    validation.integer_lattice(rx, "rest")
    theorem = "Lemma SuffCondSPQBinaryRelax (corrected)"
    if pp == qq:
        return Derivation(0.0, theorem)
    columns = np.union1d(rx, rx + 1.0)  # every x' where a shifted mass can sit
    below, here = _mass_at(rx, rp, columns - 1.0), _mass_at(rx, rp, columns)
    if pp < qq:
        shifted = (qq - pp) * below
        stay = pp * below + (1.0 - qq) * here
    else:
        shifted = (pp - qq) * here
        stay = qq * below + (1.0 - pp) * here
    psi = float(np.min(stay[shifted > 0.0] / shifted[shifted > 0.0]))
    theta = 1.0 / math.log(math.exp(eps) + math.expm1(eps) * psi)
    return Derivation(theta, theorem)


def _mass_at(xs: FloatArray, ps: FloatArray, at: FloatArray) -> FloatArray:
    """Pr(X = at) for a law with sorted support xs (0 off the support)."""
    k = np.minimum(np.searchsorted(xs, at), xs.size - 1)
    return np.where(xs[k] == at, ps[k], 0.0)


def kantorovich(a: Distribution, b: Distribution, eps: float) -> Derivation:
    """Proposition 1 / Proposition ComputePiStar on two priors of X: sup|x - x'| / eps."""
    return Derivation(plan_spread(a, b) / eps, "Proposition 1")


def exact(a: Distribution, b: Distribution, eps: float) -> Derivation:
    """The smallest theta whose exact two-sided loss on (A, B) is <= eps (docs/errata.md, "A
    user-local exact calibration"; the search: core.exact_search).

    Applied to user i's own pair it is valid for every population (a mixture ratio with equal
    weights is at most its largest component ratio). theta = 0 when even theta -> 0 passes
    (docs/errata.md 12): right for this pair alone, the release takes the max.
    """
    return Derivation(exact_theta(a, b, eps), "exact audit (ERRATA)")
