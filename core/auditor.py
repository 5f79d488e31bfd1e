"""Exact two-sided privacy loss of two discrete priors of X under Laplace(theta) noise.

P_Y(y|A) = sum_k a_k e^{-|y - x_k|/theta} / (2 theta). Between adjacent support points the
ratio P_Y(y|A)/P_Y(y|B) has the form (c1 + c2 u)/(d1 + d2 u) with u = e^{2y/theta}, which is
monotone, and beyond the supports it is the constant sum a_k e^{+-x_k/theta} / sum b_k
e^{+-x_k/theta} (the two tails), which is also its value at the outermost support point.
So sup over y is a max over the support points (ERRATA, "A user-local exact calibration").
Everything is in log space (log-sum-exp).

Robust mode (docs/privacy.md, "Robust calibration over an L1 ball"): with radii
(r_A, r_B) the loss is the sup over every law A' within L1 distance r_A of A and B' within r_B
of B, both on their ball supports (supp A, plus the domain when r_A > 0). At a fixed y the ratio
(A'*L)(y)/(B'*L)(y) is linear over linear, so its max over the balls is the max of the numerator
over the A-ball divided by the min of the denominator over the B-ball; each is a greedy move of
up to r/2 mass (``extreme_weights``). The order of the coefficients e^{-|y-x|/theta} is the order
of -|y-x|, which does not depend on theta, so the extreme laws of every evaluation point are
computed once. For each fixed (A', B') the sup over y is at a point of its support (above),
and every such point is an evaluation point, so swapping the two sups gives the exact robust
loss as a max over the evaluation points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pufferfish_core import validation
from pufferfish_core.distribution import Distribution
from pufferfish_core.validation import FloatArray

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

    __slots__ = (
        "_geometry", "_logw", "_split", "_noiseless", "_span", "_grid", "_points", "_xs", "_robust"
    )

    def __init__(
        self, a: Distribution, b: Distribution,
        radius_a: float = 0.0, radius_b: float = 0.0, domain: Sequence[float] | None = None,
    ) -> None:
        """The audit of (A, B); with a radius > 0 the robust audit over the L1 ball(s)
        (module docstring), whose laws live on supp(center) plus ``domain``."""
        balls = Balls(radius_a, radius_b, domain)
        self._robust: tuple[FloatArray, FloatArray, FloatArray, FloatArray] | None = None
        if balls.robust:
            self._init_robust(a, b, balls)
            return
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

    def _init_robust(self, a: Distribution, b: Distribution, balls: Balls) -> None:
        (ax, ap), (bx, bp) = balls.supports(a, b)
        ra, rb = balls.radius_a, balls.radius_b
        points = np.union1d(ax, bx)
        self._points = points
        self._xs = np.concatenate((ax, bx))
        self._split = ax.size
        self._span = float(points[-1] - points[0])
        self._grid = None
        self._geometry = None
        dist_a = -np.abs(points[:, None] - ax[None, :])  # coefficient order at each point
        dist_b = -np.abs(points[:, None] - bx[None, :])
        with np.errstate(divide="ignore"):
            forward = np.log(np.concatenate(
                (extreme_weights(ap, ra, dist_a, True), extreme_weights(bp, rb, dist_b, False)),
                axis=1,
            ))
            reverse = np.log(np.concatenate(
                (extreme_weights(ap, ra, dist_a, False), extreme_weights(bp, rb, dist_b, True)),
                axis=1,
            ))
        self._logw = forward[0]
        self._robust = (forward, reverse, ap, bp)
        self._noiseless = _robust_noiseless(ax, ap, ra, bx, bp, rb)

    def _robust_sides(self, theta: float) -> tuple[float, float]:
        assert self._robust is not None
        forward_w, reverse_w, _, _ = self._robust
        if self._geometry is None:
            self._geometry = -np.abs(self._points[:, None] - self._xs[None, :])
        g = self._geometry / theta
        k = self._split
        fwd = _row_logsumexp(g[:, :k] + forward_w[:, :k]) - _row_logsumexp(
            g[:, k:] + forward_w[:, k:]
        )
        rev = _row_logsumexp(g[:, k:] + reverse_w[:, k:]) - _row_logsumexp(
            g[:, :k] + reverse_w[:, :k]
        )
        return float(fwd.max()), float(rev.max())

    def sides(self, theta: float) -> tuple[float, float]:
        """(forward, reverse) at theta > 0."""
        if self._robust is not None:
            return self._robust_sides(theta)
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


Support = tuple[FloatArray, FloatArray]  # (points, probs) of the laws in a ball
WHOLE = 2.0  # L1 diameter of the simplex: a ball of radius >= 2 holds every law


@dataclass(frozen=True, slots=True)
class Balls:
    """The L1 balls B(A, radius_a) and B(B, radius_b) around a pair of laws (A, B), whose laws
    live on supp(center) plus ``domain`` (module docstring); a radius 0 is the law itself.
    The radii are validated (finite, >= 0) on construction."""

    radius_a: float = 0.0
    radius_b: float = 0.0
    domain: Sequence[float] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "radius_a", validation.radius(self.radius_a, "radius_a"))
        object.__setattr__(self, "radius_b", validation.radius(self.radius_b, "radius_b"))

    @property
    def robust(self) -> bool:
        """Some radius is > 0: the robust audit, not the plain one."""
        return self.radius_a > 0.0 or self.radius_b > 0.0

    def supports(self, a: Distribution, b: Distribution) -> tuple[Support, Support]:
        """(points, probs) of the laws in each ball (``ball_support``)."""
        return (ball_support(a, self.radius_a, self.domain),
                ball_support(b, self.radius_b, self.domain))


def ball_support(law: Distribution, radius: float, domain: Sequence[float] | None) -> Support:
    """(points, probs) of the laws in the ball: the positive support when radius = 0, else
    supp(law) (zero-probability points included) plus ``domain``, zeros where law has none."""
    if radius == 0.0:
        return law.positive_arrays()
    xs, ps = law.arrays()
    extra = np.zeros(0) if domain is None else validation.finite_vector(list(domain), "domain")
    points = np.union1d(xs, extra)
    probs = np.zeros(points.size)
    probs[np.searchsorted(points, xs)] = ps
    return points, probs


def extreme_weights(probs: FloatArray, radius: float, order: FloatArray, top: bool) -> FloatArray:
    """For each row c of ``order``: the law in {p' : sum p' = 1, p' >= 0, |p' - p|_1 <= r}
    that maximises (top) or minimises sum p'_k g(c_k) for any increasing g.

    Greedy (the LP's optimum): move m = min(r/2, 1 - p_best) mass to the best point (largest
    c for top, smallest otherwise), taken from the worst points first. A move of d from j to
    i costs 2d in L1 and changes the objective by d (g(c_i) - g(c_j)), so the cheapest gain is
    always from the worst remaining point to the best one.
    """
    rows = order if top else -order
    n, k = rows.shape
    best = np.argmax(rows, axis=1)
    out = np.broadcast_to(probs, (n, k)).copy()
    if radius == 0.0:
        return out
    moved = np.minimum(min(radius, WHOLE) / 2.0, 1.0 - probs[best])
    ascending = np.argsort(rows, axis=1, kind="stable")
    idx = np.arange(n)[:, None]
    avail = out[idx, ascending]
    avail[ascending == best[:, None]] = 0.0
    before = np.cumsum(avail, axis=1) - avail
    take = np.clip(moved[:, None] - before, 0.0, avail)
    out[idx, ascending] -= take
    out[np.arange(n), best] += moved
    return np.maximum(out, 0.0)


def _robust_noiseless(
    ax: FloatArray, ap: FloatArray, ra: float, bx: FloatArray, bp: FloatArray, rb: float
) -> tuple[float, float]:
    """As theta -> 0 the ratio at a point x tends to A'(x)/B'(x): max over the balls of
    log max A'(x) / min B'(x), both ways (a bound on every law's noiseless loss)."""
    points = np.union1d(ax, bx)

    def on(xs: FloatArray, ps: FloatArray, r: float, up: bool) -> FloatArray:
        out = np.zeros(points.size)
        at = np.searchsorted(points, xs)
        out[at] = np.minimum(ps + r / 2.0, 1.0) if up else np.maximum(ps - r / 2.0, 0.0)
        return out

    def side(top: FloatArray, low: FloatArray) -> float:
        live = top > 0.0
        if np.any(low[live] <= 0.0):
            return math.inf
        return float(np.max(np.log(top[live]) - np.log(low[live])))

    return (
        side(on(ax, ap, ra, True), on(bx, bp, rb, False)),
        side(on(bx, bp, rb, True), on(ax, ap, ra, False)),
    )


def _noiseless_loss(
    ax: FloatArray, ap: FloatArray, bx: FloatArray, bp: FloatArray
) -> tuple[float, float]:
    if ax.size != bx.size or not np.array_equal(ax, bx):
        return math.inf, math.inf
    log_ratio = np.log(ap) - np.log(bp)
    return float(log_ratio.max()), float(-log_ratio.min())


def audit(
    a: Distribution, b: Distribution, theta: float,
    radius_a: float = 0.0, radius_b: float = 0.0, domain: Sequence[float] | None = None,
) -> AuditResult:
    """Exact two-sided loss of priors A, B of X under Laplace(theta); theta = 0: no noise.

    With a radius > 0: the robust loss, sup over every A' within L1 distance radius_a of A and
    B' within radius_b of B (laws on supp(center) plus ``domain``; module docstring). At
    theta = 0 the robust mode returns an upper bound (max A'(x) / min B'(x) pointwise).
    """
    th = validation.theta(theta)
    auditor = PairAuditor(a, b, radius_a, radius_b, domain)
    if th == 0.0:
        forward, reverse = auditor.noiseless
    else:
        forward, reverse = auditor.sides(th)
    return AuditResult(loss=max(forward, reverse), forward=forward, reverse=reverse)


def audit_vector(
    coordinates: Sequence[tuple[Distribution, Distribution, float]],
) -> AuditResult:
    """Exact two-sided loss of a release of independent Laplace coordinates, coordinate c
    noised at theta_c, where one user's pair moves coordinate c from prior A_c to B_c
    (docs/privacy.md, "Per-group releases"). The joint density factorises over coordinates
    and each factor depends on its own output only, so the sup of the joint log ratio is the
    sum of the coordinates' sups, in each direction: forward = sum forward_c, reverse = sum
    reverse_c (a coordinate the pair does not move is A_c = B_c and adds 0)."""
    validation.non_empty(list(coordinates), "coordinates")
    sides = [audit(a, b, theta) for a, b, theta in coordinates]
    forward = sum(r.forward for r in sides)
    reverse = sum(r.reverse for r in sides)
    return AuditResult(loss=max(forward, reverse), forward=forward, reverse=reverse)
