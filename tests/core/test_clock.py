"""core.clock: tick k is due at k x period since the epoch; windows are functions of k."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pufferfish_core.clock import latest_tick, tick_due, window_of_tick
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.schedule import window_ticks


def test_tick_k_is_due_at_k_periods_since_the_epoch() -> None:
    assert tick_due(0, 2.0) == 0.0
    assert tick_due(900_000_000, 2.0) == 1_800_000_000.0
    assert tick_due(7, 0.5) == 3.5


@pytest.mark.parametrize("period", [1.0, 0.1, 0.3, 2.5, 7.0, 1 / 3])
def test_latest_tick_is_the_last_tick_due_at_or_before_now(period: float) -> None:
    for now in (0.0, 1.0, 1_764_300_000.0, 1_764_300_000.05, 1_764_300_123.456789):
        k = latest_tick(now, period)
        assert tick_due(k, period) <= now < tick_due(k + 1, period)
        # and exact rational arithmetic agrees up to the float product's rounding
        exact = Fraction(now) / Fraction(period)
        assert abs(k - int(exact)) <= 1


def test_latest_tick_just_after_a_due_time_is_that_tick() -> None:
    for k in (1, 10, 17_643_000_001):
        assert latest_tick(tick_due(k, 0.1) + 1e-6, 0.1) == k
        assert latest_tick(tick_due(k, 0.1) - 1e-3, 0.1) == k - 1
    assert latest_tick(3.0, 0.1) == 30  # exactly on a due time (0.1 is 1/10, not its float)


def test_the_window_of_a_tick_is_the_window_of_its_due_time() -> None:
    # period 2 s, windows of 60 s: ticks 0..29 in window 0, 30..59 in window 1
    assert [window_of_tick(k, 2.0, 60.0) for k in (0, 29, 30, 59, 60)] == [0, 0, 1, 1, 2]
    assert window_of_tick(12, 2.0, None) is None


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_a_period_that_is_not_a_positive_number_is_refused(bad: float) -> None:
    with pytest.raises(PufferfishInputError, match="release_period_seconds"):
        tick_due(1, bad)
    with pytest.raises(PufferfishInputError, match="release_period_seconds"):
        latest_tick(10.0, bad)


@pytest.mark.parametrize(("period", "window"), [(0.7, 100.3), (0.1, 60.0), (2.0, 600.0),
                                                 (1 / 3, 7.0)])
def test_windows_agree_with_the_plan_s_window_ticks(period: float, window: float) -> None:
    """A worker's window of tick k is the plan's (core.schedule.window_ticks), also on the
    boundaries: both read the settings' exact decimals."""
    for j in (0, 1, 17, 17_643_001, 29_930_457):
        first, last = window_ticks(j, period, window)
        assert window_of_tick(first, period, window) == j
        assert window_of_tick(last, period, window) == j
        assert window_of_tick(first - 1, period, window) == j - 1
        assert window_of_tick(last + 1, period, window) == j + 1
