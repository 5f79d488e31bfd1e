"""The public clock, exactly: which ticks learn, which window a tick is in, how long a budget lasts.

Tick k (an integer) is due at k x release_period seconds after the clock's origin (the Unix
epoch). A learning round is due on tick k when a multiple of learn_period lies in
((k-1) x release_period, k x release_period]: the first tick at or after each multiple
(``learning_due``; ``rounds_due`` counts the multiples up to tick k). Privacy window j covers the
times [j x W, (j+1) x W); its ticks are the k with j x W <= k x release_period < (j+1) x W
(``window_ticks``). Every worker and ``pufferfish plan`` derive the same ticks from these
functions; the arithmetic is on the exact decimals of the settings (0.1 is 1/10, as core.budget's
Accountant records charges), never on floats, so tick 1.7e10 of a 0.1 s clock is as exact as
tick 3 (docs/privacy.md, "Whether and when records appear").

The budget on that clock (``budget_schedule``): on each tick a learning round first when one is
due (charge l), then a release (charge c); the first charge that does not fit ends everything
(until the next window). Over the first t ticks the spend is S(t) = t c + rho(t) l, rho(t) the
learning ticks among them; S is nondecreasing, so the releases are max{t : S(t) <= budget},
found by bisection in O(log(budget / c)) steps with no cap on t, and the rounds are rho of that
plus one when the next tick learns and its charge still fits. rho depends on where the ticks
start relative to the multiples of learn_period (the phase): a start on tick 1 after the origin
has the fewest rounds in every prefix (rho(t) = floor(t P / L)), the worst phase the most
(ceil(t P / L)), so the worst phase gives the most rounds and the fewest releases of any start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from pufferfish_core import validation
from pufferfish_core.budget import exact_decimal

# Windows whose tick and learning pattern repeats within this many are counted one by one
# (exact over every window); beyond it the figures are bounds over every phase.
WINDOW_ENUMERATION_LIMIT = 10_000


@lru_cache(maxsize=64)
def _ratio(release_period: float, learn_period: float) -> Fraction:
    return exact_decimal(release_period) / exact_decimal(learn_period)


def rounds_due(tick: int, release_period: float, learn_period: float) -> int:
    """Multiples of learn_period in (0, tick x release_period]: the learning rounds due by tick
    ``tick`` of a clock whose ticks are numbered from the origin (module docstring)."""
    ratio = _ratio(release_period, learn_period)
    return (tick * ratio.numerator) // ratio.denominator


def learning_due(tick: int, release_period: float, learn_period: float | None) -> bool:
    """A learning round is due on ``tick`` (>= 1): the first tick at or after a multiple of
    learn_period. At most one round per tick, however short learn_period is."""
    if learn_period is None or tick < 1:
        return False
    due = rounds_due(tick, release_period, learn_period)
    return due > rounds_due(tick - 1, release_period, learn_period)


def learning_ticks(first: int, last: int, release_period: float,
                   learn_period: float | None) -> int:
    """How many of the ticks first..last (first >= 1) a learning round is due on."""
    if learn_period is None or last < first:
        return 0
    if _ratio(release_period, learn_period) >= 1:
        return last - first + 1  # every tick learns
    return (rounds_due(last, release_period, learn_period)
            - rounds_due(first - 1, release_period, learn_period))


def window_ticks(window: int, release_period: float, window_seconds: float) -> tuple[int, int]:
    """(first, last) tick of privacy window ``window`` = [window x W, (window+1) x W)."""
    ratio = exact_decimal(window_seconds) / exact_decimal(release_period)
    return _ceil(window * ratio), _ceil((window + 1) * ratio) - 1


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


@dataclass(frozen=True)
class Phase:
    """Where a run of ticks starts relative to the learning clock: rho(t), the learning ticks
    among its first t ticks, is (offset + t num) // den (num / den = P / L < 1, 0 <= offset <
    den), or t when every tick learns, or 0 without learning."""

    num: int
    den: int
    offset: int

    @classmethod
    def none(cls) -> Phase:
        return cls(0, 1, 0)

    @classmethod
    def at(cls, first_tick: int, release_period: float, learn_period: float | None) -> Phase:
        """The run that starts on ``first_tick`` of the clock (tick 1: just after the learning
        tick of the origin, the fewest rounds in every prefix)."""
        if learn_period is None:
            return cls.none()
        r = _ratio(release_period, learn_period)
        if r >= 1:
            return cls(1, 1, 0)
        return cls(r.numerator, r.denominator, ((first_tick - 1) * r.numerator) % r.denominator)

    @classmethod
    def worst(cls, release_period: float, learn_period: float | None) -> Phase:
        """The phase with the most rounds in every prefix: rho(t) = ceil(t P / L)."""
        base = cls.at(1, release_period, learn_period)
        return cls(base.num, base.den, base.den - 1 if base.num < base.den else 0)

    def rounds(self, ticks: int) -> int:
        if self.num >= self.den:
            return ticks
        return (self.offset + ticks * self.num) // self.den


@dataclass(frozen=True)
class Schedule:
    """How long a budget lasts on the public clock: releases, learning rounds, and
    ``seconds`` = releases x release_period (the budget lasts that long from the first tick's
    period start)."""

    releases: int
    learning_rounds: int
    seconds: float


@dataclass(frozen=True)
class _Charges:
    """budget, release and learning charges as integers over one common denominator."""

    budget: int
    release: int | None  # None: infinite (never affordable)
    learn: int

    @classmethod
    def of(cls, total: float, release: float, learn: float | None) -> _Charges:
        total = validation.nonnegative(total, "total")
        release = validation.positive_number(release, "release_charge")
        exact = [exact_decimal(total),
                 Fraction(0) if learn is None else exact_decimal(
                     validation.positive(learn, "learn_charge"))]
        if math.isfinite(release):
            exact.append(exact_decimal(release))
        den = math.lcm(*(x.denominator for x in exact))
        ints = [x.numerator * (den // x.denominator) for x in exact]
        return cls(ints[0], ints[2] if len(ints) > 2 else None, ints[1])


def _run(charges: _Charges, phase: Phase, limit: int | None) -> tuple[int, int]:
    """(releases, rounds) of ticks on ``phase``, at most ``limit`` of them (None: no limit)."""
    b, c, learn = charges.budget, charges.release, charges.learn
    hi = 0 if c is None else b // c
    if limit is not None:
        hi = min(hi, limit)
    lo = 0
    while lo < hi:  # max t with S(t) <= b; S(0) = 0 <= b
        mid = (lo + hi + 1) // 2
        assert c is not None
        if mid * c + phase.rounds(mid) * learn <= b:
            lo = mid
        else:
            hi = mid - 1
    rounds = phase.rounds(lo)
    spent = lo * (c or 0) + rounds * learn
    if ((limit is None or lo < limit) and phase.rounds(lo + 1) > rounds
            and spent + learn <= b):
        rounds += 1  # the next tick learns; its release does not fit
    return lo, rounds


def budget_schedule(
    total: float,
    release_charge: float,
    release_period: float,
    learn_charge: float | None = None,
    learn_period: float | None = None,
    *,
    first_tick: int = 1,
    ticks: int | None = None,
    worst_phase: bool = False,
) -> Schedule:
    """The worker's clock from ``first_tick`` on (module docstring), over at most ``ticks``
    ticks (None: until the budget is exhausted). ``worst_phase``: the start with the most
    learning rounds and the fewest releases of any ``first_tick``."""
    learning = learn_charge is not None and learn_period is not None
    if not learning:
        phase = Phase.none()
    elif worst_phase:
        phase = Phase.worst(release_period, learn_period)
    else:
        phase = Phase.at(first_tick, release_period, learn_period)
    charges = _Charges.of(total, release_charge, learn_charge if learning else None)
    releases, rounds = _run(charges, phase, ticks)
    return Schedule(releases, rounds, releases * release_period)


@dataclass(frozen=True)
class WindowSchedule:
    """The figures of every privacy window (epoch-aligned: window j = [jW, (j+1)W)).

    ``distinct_windows``: the number of windows after which the tick and learning pattern
    repeats, all of which were counted (exact figures); None when that number exceeds
    WINDOW_ENUMERATION_LIMIT, and the figures are bounds over every phase (releases_min and
    lasts_seconds_min at least, rounds_max at most; runs_out: a window may run out)."""

    ticks_min: int
    ticks_max: int
    releases_min: int
    releases_max: int
    rounds_max: int
    runs_out: bool  # some window's budget ends before its last tick
    lasts_seconds_min: float  # shortest time from a window's start to its first refused tick
    distinct_windows: int | None


def window_schedule(
    total: float,
    release_charge: float,
    release_period: float,
    window_seconds: float,
    learn_charge: float | None = None,
    learn_period: float | None = None,
) -> WindowSchedule:
    """Releases and learning rounds of every epoch-aligned privacy window (a fresh budget each)."""
    learn = learn_period if learn_charge is not None else None
    charges = _Charges.of(total, release_charge, learn_charge if learn is not None else None)
    units = _units(release_period, window_seconds, *([] if learn is None else [learn]))
    p, w = units[0], units[1]
    period = p if learn is None else math.lcm(p, units[2])
    distinct = period // math.gcd(w, period)
    if distinct <= WINDOW_ENUMERATION_LIMIT:
        return _every_window(charges, release_period, window_seconds, learn, distinct)
    n_min, n_max = w // p, -(-w // p)
    worst = Phase.worst(release_period, learn)
    fewest, _ = _run(charges, worst, n_min)
    most, _ = _run(charges, Phase.at(1, release_period, learn), n_max)
    worst_releases, rounds = _run(charges, worst, n_max)
    runs_out = worst_releases < n_max
    return WindowSchedule(n_min, n_max, fewest, most, rounds, runs_out,
                          fewest * release_period if runs_out else window_seconds, None)


def window_pattern(
    release_period: float, window_seconds: float, learn_period: float | None = None
) -> WindowSchedule:
    """Every window's ticks and learning rounds when every tick releases: the tree mechanism
    (core/tree_plan.py) charges its window once, so nothing runs out (the caller checks that
    the learning rounds leave a release budget). ``window_schedule`` with unit charges and a
    budget of twice the most ticks a window can have, so every tick and round fits."""
    most = _ceil(exact_decimal(window_seconds) / exact_decimal(release_period)) + 1
    return window_schedule(2 * most, 1, release_period, window_seconds,
                           None if learn_period is None else 1, learn_period)


def _every_window(charges: _Charges, release_period: float, window_seconds: float,
                  learn_period: float | None, distinct: int) -> WindowSchedule:
    size, period = exact_decimal(window_seconds), exact_decimal(release_period)
    start = distinct  # the pattern repeats every `distinct` windows; j >= 1 has ticks >= 1
    ticks, releases, rounds, lasts = [], [], [], []
    for j in range(start, start + distinct):
        first, last = window_ticks(j, release_period, window_seconds)
        n = last - first + 1
        got, learned = _run(charges, Phase.at(first, release_period, learn_period), n)
        ticks.append(n)
        releases.append(got)
        rounds.append(learned)
        lasts.append(size if got == n else (first + got) * period - j * size)
    return WindowSchedule(
        min(ticks), max(ticks), min(releases), max(releases), max(rounds),
        any(r < n for r, n in zip(releases, ticks, strict=True)), float(min(lasts)), distinct,
    )


def _units(*seconds: float) -> list[int]:
    """The durations (> 0) as integers of one common exact unit."""
    exact = [exact_decimal(validation.positive(s, "seconds")) for s in seconds]
    den = math.lcm(*(x.denominator for x in exact))
    return [x.numerator * (den // x.denominator) for x in exact]
