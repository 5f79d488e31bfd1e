"""The single release agent's logic: combine partials, charge the budget, add noise once, publish.

Durability: the releases topic (1 partition) is the journal. Whenever this worker becomes the
owner of the partials partition it reads the journal to the end and restores the accountant
(epsilon_spent of the newest record) and the last seq. A release is charged and drawn, then
sent and awaited (acks=all). A record that was never acknowledged was never seen by anyone,
so after a restart its seq may be drawn afresh; a record in the journal is never re-published.
A failed send in a running worker burns its seq and keeps its charge (conservative: it might
still land), so no seq can ever carry two values.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from fractions import Fraction

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from pydantic import ValidationError

from core.budget import Accountant, BudgetExhausted, composition_charge
from core.noise import secure_laplace_release
from stream_app.metrics import Metrics
from stream_app.models import Partial, Release, to_bytes
from stream_app.settings import Settings

log = logging.getLogger(__name__)

JOURNAL_READ_LIMIT_SECONDS = 60.0


class JournalError(RuntimeError):
    """The releases journal could not be read to its end in time."""


async def read_journal(settings: Settings) -> list[Release]:
    """Every parseable release record, in log order (bounded in time)."""
    consumer = AIOKafkaConsumer(
        **settings.aiokafka_kwargs(), group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    tp = TopicPartition(settings.topic_releases, 0)
    out: list[Release] = []
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        # tansu reports the start of the last batch as the end: also wait for quiet.
        end = (await consumer.end_offsets([tp]))[tp]
        deadline = time.monotonic() + JOURNAL_READ_LIMIT_SECONDS
        last_data = time.monotonic()
        while True:
            batch = await consumer.getmany(tp, timeout_ms=200)
            for rec in batch.get(tp, []):
                last_data = time.monotonic()
                try:
                    out.append(Release.model_validate_json(rec.value or b""))
                except ValidationError:
                    log.warning("journal: skipping an unparseable record at offset %d", rec.offset)
            position = await consumer.position(tp)
            quiet = time.monotonic() - last_data >= settings.journal_quiet_seconds
            if position >= end and quiet:
                return out
            if time.monotonic() > deadline:
                raise JournalError(f"releases journal not read to its end in {deadline:g} s")
    finally:
        await consumer.stop()


def combine(partials: Mapping[int, Partial]) -> tuple[int, float, float, str | None, float]:
    """(sum in grid units, max theta, max spread, binding pair, newest ts) over partitions."""
    total = sum(p.sum_units for p in partials.values())
    theta = max((p.theta for p in partials.values()), default=0.0)
    spread = max((p.spread for p in partials.values()), default=0.0)
    binding = next((p.binding_pair for p in partials.values() if p.theta == theta), None)
    newest = max((p.newest_ts for p in partials.values()), default=0.0)
    return total, theta, spread, binding, newest


class Releaser:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        partials: Callable[[], Mapping[int, Partial]],
        is_owner: Callable[[], bool],
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._partials = partials
        self._is_owner = is_owner
        self._lock = asyncio.Lock()
        self._producer: AIOKafkaProducer | None = None
        self.accountant = Accountant(settings.budget_total)
        self.last_seq = 0
        self.synced = False
        self.exhausted = False
        self._events_since_release = 0
        self._said_zero_theta = False

    def invalidate(self) -> None:
        """Ownership may have changed: re-read the journal before the next release."""
        self.synced = False

    async def stop(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()

    async def _sync(self) -> None:
        records = await read_journal(self.settings)
        self.accountant = Accountant(self.settings.budget_total)
        self.last_seq = max((r.seq for r in records), default=0)
        spent = max((r.epsilon_spent for r in records), default=0.0)
        self.exhausted = False
        if spent > 0:
            try:
                self.accountant.spend(spent)
            except BudgetExhausted:
                self._mark_exhausted("the journal already spent more than budget_total")
        self.metrics.epsilon_spent.set(self.accountant.spent)
        self.metrics.epsilon_remaining.set(max(self.accountant.remaining, 0.0))
        if records:
            self.metrics.theta.set(records[-1].theta)
        self.synced = True
        log.info("journal restored: last seq %d, epsilon spent %g", self.last_seq, spent)

    def _mark_exhausted(self, why: str) -> None:
        if not self.exhausted:
            log.warning("privacy budget exhausted (%s): releases stop", why)
        self.exhausted = True
        self.metrics.budget_exhausted.set(1)

    async def count_events(self, n: int) -> None:
        """Called for every partial: release early after release_every_events new events."""
        every = self.settings.release_every_events
        self._events_since_release += n
        if every is not None and self._events_since_release >= every:
            await self.release_once()

    async def release_once(self) -> Release | None:
        async with self._lock:
            if not self._is_owner():
                return None
            if not self.synced:
                await self._sync()
            if self.exhausted:
                return None
            return await self._release()

    async def _release(self) -> Release | None:
        s = self.settings
        total_units, theta, spread, binding, newest = combine(self._partials())
        if theta <= 0:
            # theta 0 would publish the exact sum: only when no configured pair needs noise.
            if not self._said_zero_theta:
                log.info("no release: the calibrated theta is 0 (no user needs noise yet)")
                self._said_zero_theta = True
            return None
        charge = composition_charge(spread, theta, s.epsilon)
        # Draw first: a draw that fails (or is refused by the budget below) is never
        # published, so it costs nothing; a charge is never taken for a release not drawn.
        value = float(Fraction(total_units) * Fraction(2) ** s.grid_log2)
        noisy = secure_laplace_release(value, theta, s.grid_log2)
        try:
            self.accountant.spend(charge)
        except BudgetExhausted:
            self._mark_exhausted(f"a release would cost {charge:g}")
            return None
        self.last_seq += 1  # burnt even if the send fails: a seq never carries two values
        record = Release(
            seq=self.last_seq, ts=time.time(), noisy_sum=noisy, theta=theta, epsilon=s.epsilon,
            epsilon_spent=self.accountant.spent,
            epsilon_remaining=max(self.accountant.remaining, 0.0),
            pairs=list(s.pairs), rule=s.rule, binding_pair=binding,
        )
        try:
            producer = await self._get_producer()
            await producer.send_and_wait(s.topic_releases, to_bytes(record), partition=0)
        except Exception as exc:  # noqa: BLE001 - broker trouble must not kill the worker
            self.metrics.broker_errors.inc()
            log.error("release seq %d not acknowledged (%s); seq skipped", record.seq,
                      type(exc).__name__)
            return None
        self._events_since_release = 0
        self.metrics.releases.inc()
        self.metrics.theta.set(theta)
        self.metrics.epsilon_spent.set(record.epsilon_spent)
        self.metrics.epsilon_remaining.set(record.epsilon_remaining)
        if newest > 0 and math.isfinite(newest):
            self.metrics.release_lag_seconds.observe(max(record.ts - newest, 0.0))
        return record

    async def _get_producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            producer = AIOKafkaProducer(
                **self.settings.aiokafka_kwargs(), acks="all", linger_ms=0,
                request_timeout_ms=15000,
            )
            await producer.start()
            self._producer = producer
        return self._producer
