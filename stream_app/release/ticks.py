"""Which tick of the public clock the release agent handles next, and what a tick's records say
about the clock (docs/privacy.md, "The public clock"; docs/design.md, "Release durability")."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from fractions import Fraction

from pufferfish_core.clock import latest_tick, tick_due, tick_due_exact
from pufferfish_core.plan import learning_due, radius_failure_bound
from stream_app.domain.models import Release
from stream_app.metrics import Metrics
from stream_app.release.ledger import Ledger
from stream_app.release.records import TickFacts
from stream_app.settings import Settings


class TickCursor:
    """The next tick: after every tick published (the journals, via the ledger) or settled
    here, and never one due before this worker started (those are an outage's gaps).

    A tick is settled when published (by any owner: the journals say which ticks are) or
    skipped for good (budget exhausted in its window, theta 0, a refused sum); any other tick
    the releaser could not publish (not the owner, paused, a fence, broker trouble) is tried
    again, never dropped."""

    def __init__(self, settings: Settings, ledger: Ledger, started: float) -> None:
        self.settings = settings
        self.ledger = ledger
        self.cursor = latest_tick(started, settings.release_period_seconds) + 1

    def due(self, tick: int) -> float:
        return tick_due(tick, self.settings.release_period_seconds)

    def due_exact(self, tick: int) -> Fraction:
        """The due time windows are read from (core.clock: exact, as core.schedule)."""
        return tick_due_exact(tick, self.settings.release_period_seconds)

    def next(self) -> int:
        return max(self.cursor, self.ledger.last_tick + 1)

    def restore_due(self, releases: Sequence[Release], tick: int | None) -> Fraction:
        """The due time whose window a restore from these journal records is for: that of the
        tick published next (the journals hold nothing of a later window, since their newest
        tick is before it), never that of this worker's start or of a tick published already.
        """
        newest = max((r.tick for r in releases if r.tick is not None), default=-1)
        return self.due_exact(max(self.next(), newest + 1, -1 if tick is None else tick))

    def settle(self, tick: int) -> None:
        """Tick ``tick`` is done: published, or skipped for good."""
        self.cursor = max(self.cursor, tick + 1)

    def published(self, tick: int) -> None:
        self.ledger.last_tick = max(self.ledger.last_tick, tick)
        self.settle(tick)

    def round_due(self, tick: int) -> bool:
        """A learning round is due on ``tick`` (core.plan.learning_due on tick numbers) and
        no ``priors`` record has a tick >= it (a round is never learned twice)."""
        s = self.settings
        return (self.ledger.last_round_tick < tick
                and learning_due(tick, s.release_period_seconds, s.learn_period_seconds))

    def facts(self, tick: int, groups: int, learned: bool) -> TickFacts:
        """The tick, its window and the failure bound G·R·β so far (core.plan
        .radius_failure_bound, R in the horizon of ``pufferfish plan``)."""
        window = self.ledger.window
        if not learned:
            return TickFacts(tick, window)
        rounds = self.ledger.rounds_in_horizon()
        return TickFacts(tick, window, rounds, radius_failure_bound(
            groups, rounds, self.settings.prior_confidence_beta))


class ReleaseTiming:
    """The metrics of a published release, with its tick's lateness, and its lag on the
    workers' clocks when it includes a record consumed since the previous one."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._since = time.time()  # records consumed before this worker started: not new

    def published(self, record: Release, due: float, consumed: float) -> None:
        self.metrics.releases.inc()
        self.metrics.theta.set(record.theta)
        self.metrics.release_charge.set(record.charge)
        self.metrics.released.show(record)
        self.metrics.release_tick_lateness_seconds.observe(max(record.ts - due, 0.0))
        if consumed > self._since and math.isfinite(consumed):
            self.metrics.release_lag_seconds.observe(max(record.ts - consumed, 0.0))
            self._since = consumed
