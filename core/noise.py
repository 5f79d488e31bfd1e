"""Laplace noise that is safe against floating-point attacks.

Why not ``value + numpy.random.laplace(0, theta)``: textbook floating-point Laplace
sampling leaks the input through the set of reachable doubles (Mironov, CCS 2012). Here the
noise is the *discrete* Laplace distribution on a grid g = 2**grid_log2, sampled exactly with
the algorithm of Canonne, Kamath and Steinke (NeurIPS 2020, "The Discrete Gaussian for
Differential Privacy", Algorithms 1-2; the sampler OpenDP uses). All arithmetic is on Python
ints and ``fractions.Fraction``; all randomness comes from the OS CSPRNG (``secrets``), never
from ``random`` or numpy.

Mechanism: for a value x that is an exact multiple of g, release ``float(x + g*Z)`` with
``Pr[Z = z] ∝ exp(-|z| g / theta)`` (discrete Laplace with scale theta/g).

Guarantee (no epsilon slack). For every grid output y, ``Pr[y | x] = c * exp(-|y - x| / theta)``
with a normalising constant c that does not depend on x. So for two priors A, B supported on
the grid, the likelihood ratio ``Pr[y | A] / Pr[y | B]`` is exactly the ratio of the continuous
Laplace(theta) densities of A and B evaluated at y (the constants cancel). The exact two-sided
audit of the continuous mechanism takes the sup of that ratio over all real y, which bounds
the sup over grid points; hence a theta that passes the continuous audit at epsilon gives an
epsilon-private discrete release, provided every value in the declared domain is on the grid
(sums of grid multiples stay on the grid). The final conversion to float is post-processing.

Remaining limits, stated plainly:
* Timing: the number of loop iterations of the sampler depends on the sampled Z (and on
  theta), so its running time is a side channel on the noise (not directly on the value). A
  remote observer who can time releases precisely learns something about Z.
* Cost: the expected time is O(1) iterations, but the integers grow with log2(theta/g);
  theta/g is limited to 2**MAX_SCALE_LOG2 (core/validation.py) so a huge theta cannot stall
  the service.
* Exactness of the input: the caller must pass the true sum. Sums of doubles that are
  multiples of g are exact while |sum| < 2**(53 + grid_log2) (8.8e12 for grid_log2 = -10);
  beyond that the stream must sum exactly (ints) and call ``discrete_laplace_units``, which
  takes and returns integer grid units and never goes through a float.
* Output rounding: ``float(x + g*Z)`` is exact while |x + g*Z| <= 2**(53 + grid_log2); past it
  the rounding (or ±inf on overflow) is post-processing and costs no privacy.
  ``exact_float`` gives the float only when it is exact (None otherwise), for callers that
  must never publish a rounded value.
* theta == 0 returns the value unchanged; the caller may only do that when the calibrated
  theta is 0 (every configured pair needs no noise, see ERRATA 12).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable
from fractions import Fraction

from pufferfish_core import validation

# every integer of magnitude <= 2**53 is a double; 2**53 + 1 is the first one that is not
MAX_EXACT_UNITS = 2**53


def _bernoulli(p: Fraction) -> bool:
    """Exact Bernoulli(p) for a rational p in [0, 1]."""
    return secrets.randbelow(p.denominator) < p.numerator


def _bernoulli_exp_neg_at_most_one(gamma: Fraction) -> bool:
    """Exact Bernoulli(exp(-gamma)) for rational gamma in [0, 1] (CKS20 Algorithm 1)."""
    k = 1
    while _bernoulli(gamma / k):
        k += 1
    return k % 2 == 1


def bernoulli_exp_neg(gamma: Fraction) -> bool:
    """Exact Bernoulli(exp(-gamma)) for any rational gamma >= 0 (CKS20 Algorithm 1)."""
    gamma = validation.exponent(gamma)
    whole = math.floor(gamma)
    for _ in range(whole):
        if not _bernoulli_exp_neg_at_most_one(Fraction(1)):
            return False
    return _bernoulli_exp_neg_at_most_one(gamma - whole)


def _geometric_exp_neg_one() -> int:
    """Number of successes before the first failure of Bernoulli(exp(-1)) trials."""
    count = 0
    while _bernoulli_exp_neg_at_most_one(Fraction(1)):
        count += 1
    return count


def sample_discrete_laplace(scale: Fraction) -> int:
    """Exact Z with Pr[Z = z] ∝ exp(-|z| / scale), scale a positive rational (CKS20 Alg. 2)."""
    scale = validation.sampler_scale(scale)
    t, s = scale.numerator, scale.denominator  # scale = t / s
    while True:
        u = secrets.randbelow(t)
        if not bernoulli_exp_neg(Fraction(u, t)):
            continue
        x = u + t * _geometric_exp_neg_one()  # x ~ Geometric(1 - exp(-1/t)) on {0, 1, ...}
        y = x // s
        negative = secrets.randbits(1) == 1
        if negative and y == 0:
            continue  # keep Pr[0] right: 0 must not be counted twice
        return -y if negative else y


def _grid(grid_log2: int) -> Fraction:
    return Fraction(2) ** validation.grid_log2(grid_log2)


def grid_contains(values: Iterable[float], grid_log2: int) -> bool:
    """True when every value is a finite real number and an exact multiple of 2**grid_log2."""
    grid = _grid(grid_log2)
    return all(validation.is_multiple(v, grid) for v in values)


def _scale(theta: object, grid_log2: int) -> Fraction:
    """theta / g as an exact positive Fraction (0 for theta 0), with the grid-safety checks."""
    return validation.noise_scale(theta, validation.grid_log2(grid_log2))


def discrete_laplace_units(units: int, theta: float, grid_log2: int = -10) -> int:
    """``units + Z`` in grid units, Z discrete Laplace with scale theta/g, g = 2**grid_log2.

    The exact-input entry point: ``units`` is the true sum as an integer number of grid units
    (any size; it never goes through a float), the result is an integer too. ``theta == 0``
    returns ``units`` unchanged (only for a calibrated theta of 0).
    """
    units = validation.integer(units, "units")
    scale = _scale(theta, grid_log2)
    if scale == 0:
        return units
    return units + sample_discrete_laplace(scale)


def exact_float(units: int, grid_log2: int) -> float | None:
    """``units * 2**grid_log2`` as a float when |units| <= MAX_EXACT_UNITS (every such value is
    exactly a double), else None: the caller refuses rather than publish a rounded value."""
    units = validation.integer(units, "units")
    grid = _grid(grid_log2)
    if abs(units) > MAX_EXACT_UNITS:
        return None
    return float(units * grid)  # exact: 53 significant bits, exponent within [-60, 113]


def grid_units(value: float, grid_log2: int) -> int | None:
    """``value / 2**grid_log2`` when that is an integer (the inverse of ``exact_float``), else
    None."""
    q = Fraction(value) / _grid(grid_log2)
    return int(q) if q.denominator == 1 else None


def secure_laplace_release(value: float, theta: float, grid_log2: int = -10) -> float:
    """Release value + g*Z, Z discrete Laplace with scale theta/g, g = 2**grid_log2.

    ``value`` must be an exact multiple of g (nothing is snapped: snapping would change the
    sensitivity). ``theta == 0`` returns the value unchanged (only for a calibrated theta of 0).
    """
    grid = _grid(grid_log2)
    value = validation.exact_real(value, "value")
    scale = _scale(theta, grid_log2)
    value = validation.on_grid(value, grid_log2)
    if scale == 0:
        return float(value)
    exact = Fraction(value) + grid * sample_discrete_laplace(scale)
    try:
        return float(exact)
    except OverflowError:
        return math.copysign(math.inf, exact)


def discrete_laplace_sd(theta: float, grid_log2: int = -10) -> float:
    """Standard deviation of g*Z, Z discrete Laplace with scale theta/g, g = 2**grid_log2:
    Pr[Z = z] ∝ q^|z| with q = e^(-g/theta) has variance 2q/(1 - q)^2."""
    theta = validation.nonnegative(theta, "theta")
    if theta == 0:
        return 0.0
    grid = 2.0 ** validation.grid_log2(grid_log2)
    q = math.exp(-grid / theta)
    return grid * math.sqrt(2.0 * q) / -math.expm1(-grid / theta)
