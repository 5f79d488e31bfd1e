"""The public clock: numbered ticks aligned to wall time (docs/privacy.md, "The public clock").

Tick k is due at k * period seconds since the Unix epoch, so every worker, and ``pufferfish
plan``, numbers the same instants the same way: which tick a release is for, which learning
rounds are due (core.plan.rounds_due on tick numbers) and which privacy window a tick belongs to
are functions of k and the settings only, never of when a worker happened to publish it.
"""

from __future__ import annotations

import math

from core import validation


def tick_due(tick: int, period: float) -> float:
    """When tick ``tick`` is due: tick * period seconds since the epoch."""
    return tick * validation.positive(period, "release_period_seconds")


def latest_tick(now: float, period: float) -> int:
    """The last tick due at or before ``now`` (the same float products as ``tick_due``)."""
    k = math.floor(validation.real(now, "now") / validation.positive(
        period, "release_period_seconds"))
    while tick_due(k + 1, period) <= now:
        k += 1
    while tick_due(k, period) > now:
        k -= 1
    return k


def window_of_tick(tick: int, period: float, window_seconds: float | None) -> int | None:
    """The privacy window of tick ``tick``: floor(due time / window_seconds); None without
    windows. A function of the tick, not of when it was published."""
    if window_seconds is None:
        return None
    size = validation.positive(window_seconds, "budget_window_seconds")
    return math.floor(tick_due(tick, period) / size)
