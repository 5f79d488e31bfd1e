"""The error bar of a release: the noise's standard deviation and a 95 % interval half-width,
for the sum of ``draws`` independent discrete Laplace draws of scale theta on the 2**grid_log2
grid (core/noise.py). Both are functions of (theta, grid_log2, draws) only: public inputs,
never the data (docs/privacy.md, "Error bars").

sd: one draw g*Z, Pr[Z = z] ∝ q^|z|, q = e^(-g/theta), has variance g^2 * 2q / (1 - q)^2
(core.noise.discrete_laplace_sd); independent draws add variances: sd * sqrt(draws).

Half-width, provably conservative (coverage >= 95 % for the discrete sum). Couple each draw
with a continuous Laplace: a geometric G with Pr[G >= k] = q^k is floor(X) for X exponential
of mean theta/g grid units, so Z = floor(X1) - floor(X2) lies within 1 grid unit of the
Laplace(theta/g) variable X1 - X2. The sum S of n draws is then within n*g of a sum L of n
independent Laplace(theta) variables, and |L| <= h implies |S| < h + n*g:
Pr[|S| <= h + n*g] >= Pr[|L| <= h]. With h the 95 % quantile of |L|, h + n*g covers S with
probability at least 95 %. |L|'s tail has a closed form (Kotz, Kozubowski and Podgorski, "The
Laplace Distribution and Generalizations", 2001, Prop. 2.3.1 on the density of a sum of
Laplace laws, integrated term by term):

    Pr[|L| > x theta] = 2 * sum_{j<n} c_j Q(j + 1, x),   c_j = C(2n-2-j, n-1) / 2^(2n-1-j)

with Q the regularised upper incomplete gamma function (Pr[Poisson(x) <= j]). Its root is
bracketed and the upper end of the bracket is kept, solved for a target a relative 1e-9 below
0.05 so that floating-point rounding cannot turn it into an under-coverage. The slack over the
exact discrete quantile is at most 2n grid units (tests/core/test_error_bars.py measures it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
from scipy.special import gammaincc

from pufferfish_core import validation
from pufferfish_core.noise import discrete_laplace_sd

LEVEL = 0.95
_TARGET_SLACK = 1e-9  # relative: aim below 1 - LEVEL so that rounding errs on the wide side


@dataclass(frozen=True, slots=True)
class ErrorBar:
    """What a release says about its own noise: its sd and its 95 % interval half-width."""

    noise_sd: float
    ci95_half_width: float


@lru_cache(maxsize=256)
def _weights(draws: int) -> tuple[float, ...]:
    """c_j, j < draws (module docstring): exact rationals, then floats; they sum to 1/2."""
    n = draws
    return tuple(float(Fraction(math.comb(2 * n - 2 - j, n - 1), 2 ** (2 * n - 1 - j)))
                 for j in range(n))


def laplace_sum_tail(x: float, draws: int) -> float:
    """Pr[|L| > x] for L a sum of ``draws`` independent standard Laplace variables, x >= 0."""
    draws = validation.at_least(draws, 1, "draws")
    x = validation.nonnegative(x, "x")
    return min(1.0, 2.0 * sum(c * float(gammaincc(j + 1, x))
                              for j, c in enumerate(_weights(draws))))


@lru_cache(maxsize=1024)
def laplace_sum_quantile(draws: int, level: float = LEVEL) -> float:
    """The smallest x (up to the slack of the module docstring, on the wide side) with
    Pr[|L| <= x] >= ``level`` for L a sum of ``draws`` standard Laplace variables."""
    from scipy.optimize import brentq  # imported here: ~0.7 CPU-s at every start otherwise
    draws = validation.at_least(draws, 1, "draws")
    level = validation.probability(level, "level")
    target = (1.0 - level) * (1.0 - _TARGET_SLACK)
    high = 1.0
    while laplace_sum_tail(high, draws) > target:
        high *= 2.0
    low = 0.0 if high == 1.0 else high / 2.0

    def excess(x: float) -> float:
        return laplace_sum_tail(x, draws) - target

    root = float(brentq(excess, low, high, xtol=1e-12, rtol=1e-14))
    while laplace_sum_tail(root, draws) > target:  # keep the side of the root that covers
        root *= 1.0 + 1e-12
    return root


def error_bar(theta: float, grid_log2: int, draws: int) -> ErrorBar:
    """sd and 95 % half-width of the sum of ``draws`` discrete Laplace(theta) draws on the
    2**grid_log2 grid (module docstring); theta 0 (no noise): both 0."""
    theta = validation.nonnegative(theta, "theta")
    draws = validation.at_least(draws, 1, "draws")
    grid = 2.0 ** validation.grid_log2(grid_log2)
    if theta == 0.0:
        return ErrorBar(0.0, 0.0)
    sd = discrete_laplace_sd(theta, grid_log2) * math.sqrt(draws)
    return ErrorBar(sd, theta * laplace_sum_quantile(draws) + draws * grid)


# --- the sum of draws of different scales (release_by_group: the total of the groups' sums) ---
_QUAD_TOLERANCE = 1e-12  # absolute, on Pr[|L| <= x]; far below the target slack


def laplace_mix_tail(x: float, thetas: Sequence[float]) -> tuple[float, float]:
    """(Pr[|L| > x], a bound on its numerical error) for L = sum_i theta_i L_i, L_i independent
    standard Laplace, x > 0, by Gil-Pelaez inversion of the characteristic function
    phi(t) = prod_i 1 / (1 + theta_i^2 t^2):

        Pr[|L| <= x] = (2 / pi) int_0^inf sin(t x) phi(t) / t dt

    (L is symmetric with a continuous density). The integral is split at t = 1 / max theta:
    adaptive quadrature below, QUADPACK's Fourier-integral rule (QAWF) above, each returning
    its own error estimate."""
    from scipy.integrate import quad  # (it loads scipy.optimize: imported here)
    x = validation.positive(x, "x")
    scales = np.asarray([validation.positive(t, "theta") for t in thetas], dtype=float)

    def phi_over_t(t: float) -> float:  # in logs: the product overflows for large t
        return math.exp(-float(np.sum(np.log1p((scales * t) ** 2)))) / t

    def sinc_phi(t: float) -> float:
        return x if t == 0.0 else math.sin(t * x) * phi_over_t(t)

    split = 1.0 / float(scales.max())
    low, low_err = quad(sinc_phi, 0.0, split, epsabs=_QUAD_TOLERANCE, epsrel=0.0, limit=500)
    high, high_err = quad(phi_over_t, split, math.inf, weight="sin", wvar=x,
                          epsabs=_QUAD_TOLERANCE, limlst=200)
    inside = 2.0 / math.pi * (low + high)
    return 1.0 - inside, 2.0 / math.pi * (low_err + high_err)


def laplace_mix_quantile(thetas: Sequence[float], level: float = LEVEL) -> float:
    """The smallest x (on the wide side, as ``laplace_sum_quantile``) with Pr[|L| <= x] >=
    ``level`` for L = sum_i theta_i L_i (``laplace_mix_tail``); equal thetas: theta times
    ``laplace_sum_quantile`` (its closed form). The root is kept only where the tail plus its
    error estimate is below the target; if the quadrature cannot certify that, the bound
    max theta x ``laplace_sum_quantile(n)`` is returned: each theta_i L_i is more peaked than
    max theta x L_i (symmetric log-concave densities), and peakedness is kept by sums of
    independent such variables (Birnbaum 1948), so that quantile is never narrower."""
    validation.non_empty(list(thetas), "thetas")
    level = validation.probability(level, "level")
    return _mix_quantile(tuple(validation.positive(t, "theta") for t in thetas), level)


@lru_cache(maxsize=256)
def _mix_quantile(thetas: tuple[float, ...], level: float) -> float:
    from scipy.optimize import brentq
    top = max(thetas)
    safe = top * laplace_sum_quantile(len(thetas), level)
    if all(t == top for t in thetas):
        return safe
    target = (1.0 - level) * (1.0 - 1e-6)

    def excess(x: float) -> float:
        return laplace_mix_tail(x, thetas)[0] - target

    root = float(brentq(excess, 1e-12 * top, safe, xtol=1e-12 * top, rtol=1e-12))
    for _ in range(100):  # step out until the tail, error estimate included, is below target
        tail, err = laplace_mix_tail(root, thetas)
        if tail + err <= target:
            return min(root, safe)
        root *= 1.0 + 1e-9
    return safe


def mixed_error_bar(thetas: Sequence[float], grid_log2: int) -> ErrorBar:
    """sd and 95 % half-width of the sum of one discrete Laplace draw at each theta on the
    2**grid_log2 grid: variances add; the half-width is ``laplace_mix_quantile`` plus one grid
    step per draw (the coupling of the module docstring holds draw by draw, whatever its
    scale). Thetas must be > 0."""
    validation.non_empty(list(thetas), "thetas")
    grid = 2.0 ** validation.grid_log2(grid_log2)
    sd = math.sqrt(sum(discrete_laplace_sd(t, grid_log2) ** 2 for t in thetas))
    return ErrorBar(sd, laplace_mix_quantile(thetas) + len(thetas) * grid)
