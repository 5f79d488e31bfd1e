"""The exact rule's search: the smallest theta whose exact two-sided loss is <= eps.

The loss of a pair does not increase with theta (docs/errata.md, "A user-local exact
calibration": for t < theta, Lap_theta = Lap_t * K with K = (t/theta)^2 delta_0 +
(1 - (t/theta)^2) Lap_theta, compare characteristic functions; post-processing cannot raise
the loss), and neither does a sup of such losses (the robust audit over L1 balls,
docs/privacy.md "Robust calibration over an L1 ball"). So one bracketing search serves both:
``smallest_passing_theta`` takes any ``PairAuditor`` and a theta known to pass.
"""

from __future__ import annotations

import math

from pufferfish_core.auditor import PairAuditor
from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishError
from pufferfish_core.kantorovich import plan_spread

_LOG_WIDTH = 5e-10


class ExactSearchFailed(PufferfishError, ArithmeticError):
    """The search found no bracket around the crossing (a numerical failure, not bad input;
    the loss's limits make it unreachable)."""


def exact_theta(a: Distribution, b: Distribution, eps: float, spread: float | None = None) -> float:
    """The smallest theta whose exact two-sided loss on (A, B) is <= eps (a validated eps);
    pass ``plan_spread(a, b)`` if known.

    0 when even theta -> 0 passes (docs/errata.md 12: right for this pair alone, the release
    takes the max). Else the search starts from plan_spread / eps, which passes
    (Proposition 1).
    """
    auditor = PairAuditor(a, b)
    if max(auditor.noiseless) <= eps:
        return 0.0
    upper = (plan_spread(a, b) if spread is None else spread) / eps
    return smallest_passing_theta(auditor, upper, eps)


def smallest_passing_theta(auditor: PairAuditor, upper: float, eps: float) -> float:
    """The smallest theta with ``auditor.loss(theta) <= eps``, from a theta ``upper`` that
    passes (up to rounding) and a loss at theta -> 0 that does not.

    Bracket the crossing of log-loss with log eps in log-theta, then shrink the bracket (false
    position with a bisection safeguard). The returned theta is the passing end of a bracket
    narrower than 5e-10 in log-theta, so it passes and is within 1e-6 (relative) of the
    infimum.
    """
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
        raise ExactSearchFailed("exact: no failing lower bracket found")
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
    raise ExactSearchFailed("exact: no passing upper bracket found")  # pragma: no cover
