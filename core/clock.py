"""The public clock: numbered ticks aligned to wall time (docs/privacy.md, "The public clock").

Tick k is due at k * period seconds since the Unix epoch, so every worker, and ``pufferfish
plan``, numbers the same instants the same way: which tick a release is for, which learning
rounds are due (core.schedule.learning_due on tick numbers) and which privacy window a tick
belongs to are functions of k and the settings only, never of when a worker happened to publish
it. Tick numbers and windows use the exact decimals of the settings (core.budget.exact_decimal,
as core.schedule does), so a worker and the plan put a tick on a window boundary alike; only
``tick_due``, the time a worker sleeps until, is a float.
"""

from __future__ import annotations

import math
from fractions import Fraction

from pufferfish_core import validation
from pufferfish_core.budget import exact_decimal


def _period(period: float) -> Fraction:
    return exact_decimal(validation.positive(period, "release_period_seconds"))


def tick_due_exact(tick: int, period: float) -> Fraction:
    """When tick ``tick`` is due, exactly: tick * period seconds since the epoch."""
    return tick * _period(period)


def tick_due(tick: int, period: float) -> float:
    """``tick_due_exact`` as a float (what a worker sleeps until)."""
    return float(tick_due_exact(tick, period))


def latest_tick(now: float, period: float) -> int:
    """The last tick due at or before ``now`` (exactly: floor(now / period))."""
    return math.floor(Fraction(validation.real(now, "now")) / _period(period))


def window_of_tick(tick: int, period: float, window_seconds: float | None) -> int | None:
    """The privacy window of tick ``tick``: floor(tick * period / window_seconds), exactly (the
    inverse of core.schedule.window_ticks); None without windows. A function of the tick, not
    of when it was published."""
    if window_seconds is None:
        return None
    return window_at(tick_due_exact(tick, period), window_seconds)


def window_at(due: Fraction | float, window_seconds: float) -> int:
    """floor(due / window_seconds) on the exact decimal of window_seconds (``due`` exact)."""
    size = exact_decimal(validation.positive(window_seconds, "budget_window_seconds"))
    return math.floor(Fraction(due) / size)
