"""The single release agent: learning rounds and releases on the public clock.

On tick k of the public clock (``on_clock(k)``, stream_app/release/ticks.py) it publishes the
exact sum (from the partials) plus noise of the ``ReleasePlan`` of the laws in force, after a DP
estimate of each group's law to ``priors`` when a learning round is due on k (learned priors).
Both are charged on one accountant and carry k; all depends only on the settings and published
laws (docs/privacy.md, "Public calibration", "The public clock").

Durability, exactness (never a rounded sum) and the split-brain fences: docs/design.md, "Release
durability". Nothing is charged before a tick's records are validated, nor when the intent
cannot be written. A worker that becomes the owner restores first (stream_app.release.restore).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from pufferfish_core.plan import ReleasePlan
from stream_app.domain.models import Partial, PriorsRecord, Release
from stream_app.domain.priors import PublicPriors, learner_for, plan_for
from stream_app.metrics import Metrics
from stream_app.release.group_release import GroupReleases
from stream_app.release.journal import bounded
from stream_app.release.journals import Journals
from stream_app.release.learning import learn
from stream_app.release.ledger import Ledger
from stream_app.release.pause import PauseGuard
from stream_app.release.publisher import SEND_TIMEOUT_MS, Publisher
from stream_app.release.tick_release import release
from stream_app.release.ticks import ReleaseTiming, TickCursor
from stream_app.release.tree_release import TreeReleases
from stream_app.settings import Settings

log = logging.getLogger(__name__)

# Safety net over a whole tick (journal reads + sends); a cancelled send burns its seq.
TICK_LIMIT_SECONDS = 30.0 + SEND_TIMEOUT_MS / 1000 + 60.0


class Releaser:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        priors: PublicPriors,
        partials: Callable[[], Mapping[int, Partial]],
        is_owner: Callable[[], bool],
        plan: ReleasePlan | None = None,
    ) -> None:
        """``plan``: the release plan of ``priors`` when the caller has computed it already
        (the worker's start-up check)."""
        s = self.settings = settings
        self.metrics = metrics
        self.initial = priors
        self.learner = learner_for(settings)
        self.partials = partials
        self._is_owner = is_owner
        self._lock = asyncio.Lock()
        self.publisher = Publisher(s, metrics)
        self.journals = Journals(s)
        self.ledger = Ledger(s, metrics)
        self.priors_seq = 0
        self.laws = dict(priors.laws)
        self.radii = dict(priors.radii)
        self.by_group = (GroupReleases(s, self.laws, self.radii) if s.release_by_group
                         else None)
        self.plan: ReleasePlan = plan if plan is not None else self.recalibrate()
        metrics.theta.set(self.plan.theta)
        self.synced = False
        self.said_zero_theta = False
        self.ticks = TickCursor(s, self.ledger, time.time())
        self.timing = ReleaseTiming(metrics)
        self.pause = PauseGuard(s, self.invalidate)
        self.tree = (TreeReleases(s, metrics, self.publisher, priors)
                     if s.release_mechanism == "tree" else None)

    # --- lifecycle ---------------------------------------------------------------------------
    def invalidate(self) -> None:
        """Ownership may have changed: re-read the journals before the next tick."""
        self.synced = False
        self.pause.generation += 1

    async def stop(self) -> None:
        self.pause.stop()
        await self.publisher.stop()
        await self.journals.close()
        if self.tree is not None:
            await self.tree.close()

    def recalibrate(self) -> ReleasePlan:
        started = time.perf_counter()
        plan = plan_for(self.settings, self.laws, self.radii)
        if self.by_group is not None:
            self.by_group.calibrate(self.laws, self.radii)
        self.metrics.recalibration_seconds.observe(time.perf_counter() - started)
        return plan

    async def _sync(self, tick: int | None) -> None:
        generation = self.pause.generation
        # the fence first: nothing of an earlier owner reaches the journals after this read
        await self.publisher.claim()
        releases, priors = await self.journals.read_all()
        got = self.ledger.restore(releases, priors, self.initial.laws, self.initial.radii,
                                  self.ticks.restore_due(releases, tick))
        if (got.laws, got.radii, got.priors_seq) != (self.laws, self.radii, self.priors_seq):
            self.laws, self.radii, self.priors_seq = got.laws, got.radii, got.priors_seq
            self.plan = self.recalibrate()
        self.metrics.priors_seq.set(self.priors_seq)
        if self.tree is not None:
            self.tree.restore(releases, priors, self.ledger.last_intent)
        if releases:
            self.metrics.theta.set(releases[-1].theta)
        self.synced = generation == self.pause.generation
        log.info("journals restored: last seq %d, last tick %d, priors round %d, epsilon "
                 "spent %g", self.ledger.last_seq, self.ledger.last_tick, self.priors_seq,
                 self.ledger.accountant.spent)

    async def _fence(self) -> bool:
        """True when nobody else has published since our last read of the journals."""
        foreign = await self.journals.foreign()
        if not foreign:
            return True
        self.ledger.adopt(foreign)
        self.invalidate()
        log.warning("another worker published (seq %d): the journals are re-read before the "
                    "tick is tried again", max(r.seq for r in foreign))
        return False

    # --- ticks -------------------------------------------------------------------------------
    def next_tick(self) -> int:
        return self.ticks.next()

    async def on_clock(self, tick: int) -> Release | None:
        """Its learning round when due, then its release; settled or tried again (ticks.py)."""
        return await self._tick(self._clock, tick)  # type: ignore[return-value]

    async def release_once(self) -> Release | None:
        """A release for ``next_tick()``, without its learning round."""
        return await self._tick(functools.partial(release, self), None)  # type: ignore[return-value]

    async def learn_once(self) -> list[PriorsRecord] | None:
        """The learning round of ``next_tick()``, whether or not one is due."""
        if self.learner is None:
            return None
        return await self._tick(functools.partial(learn, self), None)  # type: ignore[return-value]

    async def _clock(self, tick: int) -> Release | None:
        due = self.learner is not None and self.ticks.round_due(tick)
        if due and await learn(self, tick) is None and self.ticks.round_due(tick):
            if self.ledger.exhausted:
                self.ticks.settle(tick)
            return None  # the round is tried again, with its tick
        return await release(self, tick)

    async def _tick(self, action: Callable[[int], Awaitable[object]], tick: int | None) -> object:
        async with self._lock:  # ticks wait for a running tick or journal read: none is dropped
            self.pause.ensure_running()
            if not self._is_owner() or self.pause.holding():
                return None
            try:
                return await bounded(self._synced(action, tick), "tick", TICK_LIMIT_SECONDS)
            except Exception as exc:  # noqa: BLE001 - broker trouble: the tick is tried again
                if self.publisher.fenced:
                    self.pause.step_down()  # (fenced: reset by the next claim)
                    return None
                self.metrics.broker_errors.inc()
                self.invalidate()
                log.error("tick failed (%s: %s); it is tried again", type(exc).__name__, exc)
                return None
            finally:
                if self.publisher.open:  # timed out mid-transaction: the next claim aborts it
                    await self.publisher.stop()

    async def _synced(self, action: Callable[[int], Awaitable[object]],
                      tick: int | None) -> object:
        if not self.synced:
            await self._sync(tick)
            if not self.synced or not self._is_owner():
                return None
        if tick is None:
            tick = self.next_tick()
        elif tick < self.next_tick():
            return None  # published already (another owner) or settled: nothing to do
        self.ledger.roll(self.ticks.due_exact(tick))  # the tick's window: its due time's
        if self.ledger.exhausted:
            self.ticks.settle(tick)
            return None
        committed, result = await self.publisher.tick(functools.partial(action, tick))
        if committed:
            return result
        self.invalidate()  # what it sent may be in the log: read it before the next tick
        if self.publisher.fenced:
            self.pause.step_down()  # (fenced: reset by the next claim)
        return None

    async def ready_to_draw(self, charge: float) -> bool:
        if not self.synced or not self.ledger.affordable(charge):
            return False
        await self.publisher.ready()  # no charge while the broker is unreachable
        return not self.pause.holding() and await self._fence()
