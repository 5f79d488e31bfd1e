"""The single release agent: learning rounds and releases on the public clock.

Every ``release_period_seconds`` it publishes the exact sum (from the partials) plus noise drawn
by the ``ReleasePlan`` of the laws in force; every ``learn_period_seconds`` (learned priors) it
publishes a DP estimate of each group's law to ``priors`` and recalibrates from it. Both are
charged on one accountant. theta, the charge and the schedule depend only on the settings and
published laws (docs/privacy.md, "Public calibration").

Durability, exactness (never a rounded sum) and the split-brain fences: docs/design.md, "Release
durability". Nothing is charged before a tick's records are validated, nor when the intent
cannot be written. A worker that becomes the owner restores first (stream_app.release.restore).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping

from core.learning_radius import robust_round
from core.noise import discrete_laplace_units, exact_float
from core.plan import ReleasePlan, rounds_due
from stream_app.domain.models import Partial, PriorsRecord, Release, to_bytes
from stream_app.domain.priors import PublicPriors, learner_for, plan_for
from stream_app.metrics import Metrics
from stream_app.release.journal import bounded
from stream_app.release.journals import Journals
from stream_app.release.ledger import Ledger
from stream_app.release.pause import PauseGuard
from stream_app.release.publisher import SEND_TIMEOUT_MS, Publisher
from stream_app.release.records import combine, priors_records, release_record
from stream_app.release.restore import in_force
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
        self._partials = partials
        self._is_owner = is_owner
        self._lock = asyncio.Lock()
        self.publisher = Publisher(s, metrics)
        self.journals = Journals(s)
        self.ledger = Ledger(s, metrics)
        self.priors_seq = 0
        self.laws = dict(priors.laws)
        self.radii = dict(priors.radii)
        self.plan: ReleasePlan = plan if plan is not None else self._recalibrate()
        metrics.theta.set(self.plan.theta)
        self.synced = False
        self._said_zero_theta = False
        self._ticks = 0  # public-clock ticks seen by this worker
        self._learned_through = 0  # rounds_due() value of the last successful learning round
        self.pause = PauseGuard(s, self.invalidate)

    # --- lifecycle ---------------------------------------------------------------------------
    def invalidate(self) -> None:
        """Ownership may have changed: re-read the journals before the next tick."""
        self.synced = False
        self.pause.generation += 1

    async def stop(self) -> None:
        self.pause.stop()
        await self.publisher.stop()
        await self.journals.close()

    def _recalibrate(self) -> ReleasePlan:
        started = time.perf_counter()
        plan = plan_for(self.settings, self.laws, self.radii)
        self.metrics.recalibration_seconds.observe(time.perf_counter() - started)
        return plan

    # --- journals ----------------------------------------------------------------------------
    async def _sync(self) -> None:
        generation = self.pause.generation
        releases, priors = await self.journals.read_all()
        got = self.ledger.restore(releases, priors, self.initial.laws, self.initial.radii,
                                  time.time())
        if (got.laws, got.radii, got.priors_seq) != (self.laws, self.radii, self.priors_seq):
            self.laws, self.radii, self.priors_seq = got.laws, got.radii, got.priors_seq
            self.plan = self._recalibrate()
        self.metrics.priors_seq.set(self.priors_seq)
        if releases:
            self.metrics.theta.set(releases[-1].theta)
        self.synced = generation == self.pause.generation
        log.info("journals restored: last seq %d, priors round %d, epsilon spent %g",
                 self.ledger.last_seq, self.priors_seq, self.ledger.accountant.spent)

    async def _fence(self) -> bool:
        """True when nobody else has published since our last read of the journals."""
        foreign = await self.journals.foreign()
        if not foreign:
            return True
        self.ledger.adopt(foreign)
        self.invalidate()
        log.warning("another worker published (seq %d): this tick is skipped and the journals "
                    "are re-read", max(r.seq for r in foreign))
        return False

    # --- ticks -------------------------------------------------------------------------------
    async def on_clock(self) -> Release | None:
        """One tick of the public clock: a learning round when one is due, then a release."""
        self._ticks += 1
        return await self._tick(self._clock)  # type: ignore[return-value]

    async def release_once(self) -> Release | None:
        return await self._tick(self._release)  # type: ignore[return-value]

    async def learn_once(self) -> list[PriorsRecord] | None:
        if self.learner is None:
            return None
        return await self._tick(self._learn)  # type: ignore[return-value]

    async def _clock(self) -> Release | None:
        s = self.settings
        if self.learner is not None:
            due = rounds_due(self._ticks, s.release_period_seconds, s.learn_period_seconds)
            if due > self._learned_through:
                if await self._learn() is not None:
                    self._learned_through = due
                if self.ledger.exhausted or not self.synced:
                    return None  # e.g. the fence saw another owner: skip the whole tick
        return await self._release()

    async def _tick(self, action: Callable[[], object]) -> object:
        if self._lock.locked():
            return None  # a tick or a journal read is running: never queue behind it
        async with self._lock:
            self.pause.ensure_running()
            if not self._is_owner() or self.pause.holding():
                return None
            try:
                return await bounded(self._synced(action), "tick", TICK_LIMIT_SECONDS)
            except Exception as exc:  # noqa: BLE001 - broker trouble: retry on the next tick
                self.metrics.broker_errors.inc()
                self.invalidate()
                log.error("tick failed (%s: %s); retrying on the next tick",
                          type(exc).__name__, exc)
                return None

    async def _synced(self, action: Callable[[], object]) -> object:
        self.ledger.roll(time.time())
        if not self.synced:
            await self._sync()
            if not self.synced or not self._is_owner():
                return None
        if self.ledger.exhausted:
            return None
        return await action()  # type: ignore[misc]

    async def _ready_to_draw(self, charge: float) -> bool:
        if not self.synced or not self.ledger.affordable(charge):
            return False
        await self.publisher.ready()  # no charge while the broker is unreachable
        return not self.pause.holding() and await self._fence()

    async def _release(self) -> Release | None:
        s, plan = self.settings, self.plan
        if plan.theta <= 0:
            # theta 0 would publish the exact sum: the published laws need no noise
            if not self._said_zero_theta:
                log.warning("no release: theta is 0 for the laws of priors round %d",
                            self.priors_seq)
                self._said_zero_theta = True
            return None
        charge = plan.charge()
        if not await self._ready_to_draw(charge):
            return None
        total_units, _, newest = combine(self._partials())
        now = time.time()  # read before the draw: the sampler's running time depends on the noise
        self.ledger.roll(now)  # the record's window is the one of its ts (charge fits: fresh)
        noisy_units = discrete_laplace_units(total_units, plan.theta, plan.grid_log2)
        seq, books = self.ledger.charge_release(charge), self.ledger.accountant
        noisy = exact_float(noisy_units, plan.grid_log2)
        if noisy is None:
            self._refuse(seq, "sum_not_representable")
            return None
        record = release_record(s, plan, seq, now, noisy, books, self.priors_seq, charge,
                                self.ledger.window)
        if not self.ledger.intent(record):
            return None
        self.journals.sent(s.topic_releases, record.seq, record.ts)
        if not await self.publisher.send(s.topic_releases, to_bytes(record)):
            return None
        self.metrics.releases.inc()
        self.metrics.theta.set(plan.theta)
        self.metrics.release_charge.set(charge)
        if newest > 0 and math.isfinite(newest):
            self.metrics.release_lag_seconds.observe(max(record.ts - newest, 0.0))
        return record

    def _refuse(self, seq: int, reason: str) -> None:
        """Release ``seq`` is drawn and charged but not published: burn it, keep its charge."""
        self.metrics.releases_refused.labels(reason=reason).inc()
        if self.ledger.intent():
            log.error("release seq %d not published: the noisy sum is beyond 2**53 grid units, "
                      "which the JSON float noisy_sum cannot hold exactly; its seq and charge "
                      "are kept (use a coarser grid_log2)", seq)

    async def _learn(self) -> list[PriorsRecord] | None:
        s, learner = self.settings, self.learner
        assert learner is not None
        if not await self._ready_to_draw(learner.charge()):
            return None
        _, sums, _ = combine(self._partials())
        now = time.time()  # read before the draw: the sampler's running time depends on the noise
        self.ledger.roll(now)  # the record's window is the one of its ts (charge fits: fresh)
        learned = robust_round(learner, sums, self.laws, self.radii, s.prior_confidence_beta)
        charge = learner.charge()
        seq, spent = self.ledger.next_round(charge)
        # built and validated before the charge: a record that cannot exist costs nothing
        records = priors_records(seq, now, learned, learner.epsilon_learn, spent,
                                 self.ledger.window)
        if records is None:
            return None
        self.ledger.charge_round(charge)  # = seq, spent: nothing awaited since next_round
        if not self.ledger.intent():
            return None
        for r in records:
            self.journals.sent(s.topic_priors, r.seq, r.ts)
        for record in records:
            if not await self.publisher.send(s.topic_priors, to_bytes(record)):
                return None
        self.laws, self.radii, _ = in_force(records, self.laws, self.radii)  # as readers see them
        self.priors_seq = seq
        self.plan = self._recalibrate()
        self._said_zero_theta = False
        self.metrics.learning_rounds.inc()
        self.metrics.priors_seq.set(seq)
        return records
