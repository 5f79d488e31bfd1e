"""Exact two-sided privacy loss of two discrete priors of X under Laplace(theta) noise.

P_Y(y|A) = sum_k a_k e^{-|y - x_k|/theta} / (2 theta). Between adjacent support points the
ratio P_Y(y|A)/P_Y(y|B) has the form (c1 + c2 u)/(d1 + d2 u) with u = e^{2y/theta}, which is
monotone, and beyond the supports it is the constant sum a_k e^{+-x_k/theta} / sum b_k
e^{+-x_k/theta} (the two tails), which is also its value at the outermost support point.
So sup over y is a max over the support points (ERRATA, "A user-local exact calibration").
Everything is in log space (log-sum-exp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core import _validate
from core._validate import FloatArray
from core.distribution import Distribution

_SAFE_SUM = 1e-250


@dataclass(frozen=True, slots=True)
class AuditResult:
    """loss = max(forward, reverse); forward = sup_y log P(y|A)/P(y|B), reverse = B over A."""

    loss: float
    forward: float
    reverse: float


def _row_logsumexp(m: FloatArray) -> FloatArray:
    top = m.max(axis=1)
    return top + np.log(np.exp(m - top[:, None]).sum(axis=1))  # type: ignore[no-any-return]


class PairAuditor:
    """Precomputed audit of one pair (A, B): ``loss(theta)`` is cheap to call repeatedly.

    The ratio beyond the supports equals its value at the extreme support point, so only the
    support points are evaluated. Small pairs use the n x K matrix of -|y - x|/theta (every
    exponent from a difference, fully accurate); large pairs use running log-sums along the
    sorted points, O(n) per theta, when the support span is at most PREFIX_MAX_SPAN thetas
    (absolute error in the log ratio about 1e-16 * span/theta, i.e. <= ~1e-12).
    """

    __slots__ = ("_geometry", "_logw", "_split", "_noiseless", "_span", "_grid", "_points", "_xs")

    def __init__(self, a: Distribution, b: Distribution) -> None:
        ax, ap = a.positive_arrays()
        bx, bp = b.positive_arrays()
        points = np.union1d(ax, bx)
        self._noiseless = _noiseless_loss(ax, ap, bx, bp)
        self._span = float(points[-1] - points[0])
        self._split = ax.size
        self._logw = np.log(np.concatenate((ap, bp)))
        self._points = points
        self._xs = np.concatenate((ax, bx))
        self._geometry: FloatArray | None = None  # built on first use
        self._grid: tuple[FloatArray, FloatArray, FloatArray, FloatArray] | None = None
        if points.size * self._xs.size > MATRIX_MAX_CELLS:
            self._grid = (
                points - points[0],
                points[-1] - points,
                _on_grid(points, ax, ap),
                _on_grid(points, bx, bp),
            )

    def sides(self, theta: float) -> tuple[float, float]:
        """(forward, reverse) at theta > 0."""
        if self._grid is None or self._span > PREFIX_MAX_SPAN * theta:
            diff = self._matrix_log_ratio(theta)
        else:
            diff = self._prefix_log_ratio(theta)
        return float(diff.max()), float(-diff.min())

    def _matrix_log_ratio(self, theta: float) -> FloatArray:
        if self._geometry is None:
            self._geometry = -np.abs(self._points[:, None] - self._xs[None, :])
        m = self._geometry / theta + self._logw
        # Fast path: one shift per row for both sums; fall back to one shift per sum when a
        # sum would lose precision (one prior negligible next to the other at that row).
        shifted = np.exp(m - m.max(axis=1)[:, None])
        sum_a = shifted[:, : self._split].sum(axis=1)
        sum_b = shifted[:, self._split :].sum(axis=1)
        if min(sum_a.min(), sum_b.min()) > _SAFE_SUM:
            return np.log(sum_a / sum_b)  # type: ignore[no-any-return]
        return _row_logsumexp(m[:, : self._split]) - _row_logsumexp(m[:, self._split :])

    def _prefix_log_ratio(self, theta: float) -> FloatArray:
        assert self._grid is not None
        from_left, from_right, log_a, log_b = self._grid
        cl, cr = from_left / theta, from_right / theta
        return _prefix_log_density(cl, cr, log_a) - _prefix_log_density(cl, cr, log_b)

    def loss(self, theta: float) -> float:
        if theta == 0.0:
            return max(self._noiseless)
        forward, reverse = self.sides(theta)
        return max(forward, reverse)

    @property
    def noiseless(self) -> tuple[float, float]:
        """(forward, reverse) as theta -> 0 (and at theta = 0): max log a(x)/b(x), both ways."""
        return self._noiseless


MATRIX_MAX_CELLS = 4096
PREFIX_MAX_SPAN = 1e3


def _on_grid(points: FloatArray, xs: FloatArray, ps: FloatArray) -> FloatArray:
    """log-weights of one law on the union points (-inf where it has no mass)."""
    out = np.full(points.size, -np.inf)
    out[np.searchsorted(points, xs)] = np.log(ps)
    return out


def _prefix_log_density(cl: FloatArray, cr: FloatArray, logw: FloatArray) -> FloatArray:
    """log sum_k w_k e^{-|z_j - z_k|/theta} at every grid point z_j (up to 1/(2 theta)).

    cl = (z - z_0)/theta, cr = (z_max - z)/theta. Points at or left of z_j: a running
    log-sum of w_k e^{cl_k}, shifted back by cl_j; points strictly right: the same from the
    right end.
    """
    with np.errstate(invalid="ignore"):
        left = np.logaddexp.accumulate(cl + logw) - cl
        from_right = np.logaddexp.accumulate((cr + logw)[::-1])[::-1]
    right = np.full(cl.size, -np.inf)
    right[:-1] = from_right[1:] - cr[:-1]
    return np.logaddexp(left, right)  # type: ignore[no-any-return]


def _noiseless_loss(
    ax: FloatArray, ap: FloatArray, bx: FloatArray, bp: FloatArray
) -> tuple[float, float]:
    if ax.size != bx.size or not np.array_equal(ax, bx):
        return math.inf, math.inf
    log_ratio = np.log(ap) - np.log(bp)
    return float(log_ratio.max()), float(-log_ratio.min())


def audit(a: Distribution, b: Distribution, theta: float) -> AuditResult:
    """Exact two-sided loss of priors A, B of X under Laplace(theta); theta = 0: no noise."""
    th = _validate.theta(theta)
    auditor = PairAuditor(a, b)
    if th == 0.0:
        forward, reverse = auditor.noiseless
    else:
        forward, reverse = auditor.sides(th)
    return AuditResult(loss=max(forward, reverse), forward=forward, reverse=reverse)
