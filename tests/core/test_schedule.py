"""core.schedule against a tick-by-tick replay of the public clock written here from the
definitions (docs/privacy.md, "Whether and when records appear"): tick k at k x P; a learning
round on the tick ceil(m L / P) of each multiple m L; window j = the ticks with jW <= kP <
(j+1)W; on each tick learn first when due, then release; the first charge that does not fit
ends everything (until the next window). Exact Fractions of the decimals throughout.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.schedule import (
    WINDOW_ENUMERATION_LIMIT,
    budget_schedule,
    learning_due,
    learning_ticks,
    rounds_due,
    window_pattern,
    window_schedule,
    window_ticks,
)


def _f(x: str | float) -> Fraction:
    return Fraction(str(x))


def _learning_ticks(period: Fraction, learn: Fraction, last_tick: int) -> set[int]:
    """The tick of each multiple of learn: the first tick whose time is >= m x learn."""
    out, m = set(), 1
    while True:
        tick = math.ceil(m * learn / period)
        if tick > last_tick:
            return out
        out.add(tick)
        m += 1


def _replay(budget: str, release: str, learn: str | None, ticks: range,
            learning: set[int]) -> tuple[int, int, int | None]:
    """(releases, rounds, first refused tick or None) of the ticks, a fresh budget."""
    left, releases, rounds = _f(budget), 0, 0
    for tick in ticks:
        if learn is not None and tick in learning:
            if _f(learn) > left:
                return releases, rounds, tick
            left -= _f(learn)
            rounds += 1
        if _f(release) > left:
            return releases, rounds, tick
        left -= _f(release)
        releases += 1
    return releases, rounds, None


CASES = [  # budget, release charge, period, learn charge, learn period
    ("100", "1", 10, "0.1", 60),
    ("10", "0.3", 7, "0.25", 25),
    ("5", "0.2", 10, "1", 5),  # learn period shorter than the tick: every tick learns once
    ("3.3", "0.05", 2, "0.7", 9),
    ("2.6", "0.3", 0.7, "0.45", 2.1),
    ("7", "1", 0.1, "0.5", 0.35),
]


@pytest.mark.parametrize(("budget", "release", "period", "learn", "learn_period"), CASES)
def test_every_start_tick_matches_the_replay(budget: str, release: str, period: float,
                                             learn: str, learn_period: float) -> None:
    p, lp = _f(period), _f(learn_period)
    phases = (p / lp).denominator  # starts differ only by (first - 1) P mod L
    span = int(_f(budget) / _f(release)) + 2  # the budget is gone by then
    learning = _learning_ticks(p, lp, phases + 2 + span)
    seen = []
    for first in range(1, phases + 2):
        releases, rounds, _ = _replay(budget, release, learn, range(first, first + span),
                                      learning)
        got = budget_schedule(float(budget), float(release), period, float(learn),
                              learn_period, first_tick=first)
        assert (got.releases, got.learning_rounds) == (releases, rounds), first
        assert got.seconds == pytest.approx(releases * period)
        seen.append((releases, rounds))
    worst = budget_schedule(float(budget), float(release), period, float(learn), learn_period,
                            worst_phase=True)
    # the worst phase is the most rounds and the fewest releases of any start, and occurs
    assert worst.learning_rounds == max(r for _, r in seen)
    assert worst.releases == min(n for n, _ in seen)


def test_learning_ticks_and_rounds_due_match_the_definition() -> None:
    for period, learn in [(10, 60), (10, 25), (0.1, 0.3), (0.7, 2.1), (10, 5), (3, 3)]:
        p, lp = _f(period), _f(learn)
        ticks = _learning_ticks(p, lp, 500)
        assert {k for k in range(1, 501) if learning_due(k, period, learn)} == ticks
        for first, last in [(1, 500), (37, 41), (100, 99), (250, 499)]:
            want = len([k for k in ticks if first <= k <= last])
            assert learning_ticks(first, last, period, learn) == want
        assert rounds_due(500, period, learn) == math.floor(500 * p / lp)


def test_rounds_due_is_exact_at_epoch_tick_numbers() -> None:
    # 2026 on a 0.1 s clock: tick 1.78e10; rounds every 0.3 s fall on every third tick exactly
    tick = 17_800_000_001 * 3
    assert rounds_due(tick, 0.1, 0.3) == tick // 3
    assert learning_due(tick, 0.1, 0.3) and not learning_due(tick + 1, 0.1, 0.3)
    assert not learning_due(tick - 1, 0.1, 0.3)
    assert learning_due(tick, 2.0, 30.0) == (tick * 2 % 30 < 2)


def test_window_ticks_by_hand() -> None:
    assert window_ticks(0, 10.0, 120.0) == (0, 11)
    assert window_ticks(1, 10.0, 120.0) == (12, 23)
    assert window_ticks(1, 0.7, 2.0) == (3, 5)  # [2, 4): 2.1, 2.8, 3.5
    assert window_ticks(2, 0.7, 2.0) == (6, 8)  # [4, 6): 4.2, 4.9, 5.6
    assert window_ticks(3, 0.7, 2.0) == (9, 11)  # [6, 8): 6.3, 7.0, 7.7
    assert window_ticks(7, 0.7, 2.0) == (20, 22)  # [14, 16): 14.0, 14.7, 15.4


WINDOW_CASES = [  # budget, release, period, window, learn, learn period
    ("153", "0.5", 2, 600, "0.1", 30),  # examples/local.json before the tree
    ("100", "1", 10, 120, "0.1", 60),
    ("30", "1", 10, 90, "0.1", 60),  # windows alternate: one opens on a learning tick
    ("4", "1", 10, 90, "0.5", 60),  # the budget runs out in some windows only
    ("2.5", "0.3", 0.7, 9.1, "0.45", 2.5),
    ("12", "1", 0.7, 20.3, None, None),
]


def _every_window(budget: str, release: str, period: float, window: float, learn: str | None,
                  learn_period: float | None, windows: range) -> list[tuple[int, int, int,
                                                                              Fraction]]:
    """(ticks, releases, rounds, seconds to the first refused tick) of each window."""
    p, w = _f(period), _f(window)
    last = math.ceil((windows.stop + 1) * w / p)
    learning = set() if learn_period is None else _learning_ticks(p, _f(learn_period), last)
    by_window: dict[int, list[int]] = {}
    for k in range(1, last + 1):
        by_window.setdefault(math.floor(k * p / w), []).append(k)
    out = []
    for j in windows:
        ticks = by_window[j]
        releases, rounds, refused = _replay(budget, release, learn, range(ticks[0],
                                                                          ticks[-1] + 1),
                                            learning)
        lasts = w if refused is None else refused * p - j * w
        out.append((len(ticks), releases, rounds, lasts))
    return out


@pytest.mark.parametrize(("budget", "release", "period", "window", "learn", "learn_period"),
                         WINDOW_CASES)
def test_every_window_matches_the_replay(budget: str, release: str, period: float,
                                         window: float, learn: str | None,
                                         learn_period: float | None) -> None:
    got = window_schedule(float(budget), float(release), period, window,
                          None if learn is None else float(learn), learn_period)
    assert got.distinct_windows is not None
    # two full repetitions of the pattern
    seen = _every_window(budget, release, period, window, learn, learn_period,
                         range(1, 1 + 2 * got.distinct_windows))
    assert got.ticks_min == min(s[0] for s in seen) and got.ticks_max == max(s[0] for s in seen)
    assert got.releases_min == min(s[1] for s in seen)
    assert got.releases_max == max(s[1] for s in seen)
    assert got.rounds_max == max(s[2] for s in seen)
    assert got.runs_out == any(s[1] < s[0] for s in seen)
    assert got.lasts_seconds_min == pytest.approx(float(min(s[3] for s in seen)))


def test_windows_by_hand() -> None:
    # 90 s windows, ticks every 10 s, learning every 60 s: even windows open at a multiple of
    # 60 s (learning ticks 1 and 7 of the window), odd ones 30 s past one (learning tick 4).
    # Budget 8, release 1, learn 0.5. Even: 0.5 + 6 = 6.5, tick 7 learns and releases (8),
    # tick 8 is over. Odd: 3, learn 3.5, ticks 4..7 release (7.5), tick 8 is over. Both: 7
    # releases, the 8th tick (70 s into the window) refused; 2 rounds at most.
    got = window_schedule(8.0, 1.0, 10.0, 90.0, 0.5, 60.0)
    assert (got.ticks_min, got.ticks_max, got.rounds_max) == (9, 9, 2)
    assert (got.releases_min, got.releases_max) == (7, 7)
    assert got.runs_out and got.lasts_seconds_min == 70.0 and got.distinct_windows == 2


def test_long_patterns_give_bounds_that_hold() -> None:
    # 0.7 s ticks, 100.3 s windows, learning every 61.13 s: the pattern repeats only after
    # 42791 windows, so the figures are bounds over every phase; they hold on 600 windows
    args = ("9", "0.1", 0.7, 100.3, "0.5", 61.13)
    got = window_schedule(9.0, 0.1, 0.7, 100.3, 0.5, 61.13)
    assert got.distinct_windows is None and 42791 > WINDOW_ENUMERATION_LIMIT
    seen = _every_window(*args, range(1, 601))
    assert (got.ticks_min, got.ticks_max) == (143, 144)
    assert {s[0] for s in seen} == {143, 144}
    assert got.releases_min <= min(s[1] for s in seen)
    assert got.releases_max >= max(s[1] for s in seen)
    assert got.rounds_max >= max(s[2] for s in seen)
    assert got.rounds_max <= max(s[2] for s in seen) + 1
    assert got.runs_out and any(s[1] < s[0] for s in seen)
    assert got.lasts_seconds_min <= float(min(s[3] for s in seen))


def test_budget_of_a_million_uncapped() -> None:
    # budget 1e6, release 1 every 10 s, learning 0.5 every 100 s (every 10th tick). Started on
    # tick 1: t ticks cost t + 0.5 floor(t / 10); t = 952381 costs 952381 + 47619 = 1e6 exactly,
    # t + 1 is over, and tick 952382 does not learn: 952381 releases, 95238 rounds. Started on
    # a learning tick: t + 0.5 ceil(t / 10); t = 952380 costs 999999, then tick 952381 learns
    # (999999.5) and its release does not fit: 952380 releases, 95239 rounds.
    aligned = budget_schedule(1e6, 1.0, 10.0, 0.5, 100.0)
    worst = budget_schedule(1e6, 1.0, 10.0, 0.5, 100.0, worst_phase=True)
    assert (aligned.releases, aligned.learning_rounds) == (952381, 95238)
    assert (worst.releases, worst.learning_rounds) == (952380, 95239)
    # the same, tick by tick, in integer half-units
    for offset, want in [(0, (952381, 95238)), (9, (952380, 95239))]:
        left, releases, rounds, tick = 2_000_000, 0, 0, 0
        while True:
            tick += 1
            if (offset + tick) % 10 == 0:
                if left < 1:
                    break
                left, rounds = left - 1, rounds + 1
            if left < 2:
                break
            left, releases = left - 2, releases + 1
        assert (releases, rounds) == want


def test_bad_input_is_refused() -> None:
    with pytest.raises(PufferfishInputError):
        budget_schedule(-1.0, 1.0, 10.0)
    with pytest.raises(PufferfishInputError):
        budget_schedule(1.0, 0.0, 10.0)
    with pytest.raises(PufferfishInputError):
        window_schedule(1.0, 1.0, 0.0, 10.0)


def test_window_pattern_every_tick_releases_by_hand() -> None:
    # the tree charges its window once: every tick releases, every due round is counted
    day = window_pattern(10, 86_400, 21_600)  # 8,640 ticks; rounds at 0, 6, 12, 18 h
    assert (day.ticks_min, day.ticks_max, day.releases_min, day.releases_max) == (8640,) * 4
    assert (day.rounds_max, day.runs_out, day.lasts_seconds_min) == (4, False, 86_400)
    # 0.7 s ticks in 2 s windows: 3 ticks mostly, 2 in [12, 14) (12.6, 13.3); no learning
    short = window_pattern(0.7, 2.0)
    assert (short.ticks_min, short.ticks_max, short.releases_min, short.rounds_max) == (2, 3, 2, 0)
    # 90 s windows of 10 s ticks, learning every 60 s: [180, 270) holds 180 and 240
    assert window_pattern(10, 90, 60).rounds_max == 2
