"""The single release agent's logic: combine partials, charge the budget, add noise once, publish.

Durability: the releases topic (1 partition) is the journal, and a local file in data_dir
(stream_app.release_state) is a second high-water mark. Whenever this worker becomes the owner
of the partials partition it reads the journal to the end and restores the accountant and the
last seq as the max over the journal, the local file and what it already knew. A release is
drawn and charged, the charge and seq are written to the local file (an intent), then the
record is sent and awaited (acks=all). A failed send burns its seq and keeps its charge
(conservative: it might still land), so no seq can ever carry two values, and a seq in the
local file is never drawn again.

Split brain (two workers that both believe they own the release partition, e.g. one frozen past
the session timeout): two fences, neither a lock.
- Journal fence: a consumer pinned to the releases partition stays positioned after the last
  record seen. Right before drawing, the log end is asked of the broker and the consumer reads
  up to it (bounded; Journal.drain); any record this worker did not publish means another
  owner has published: adopt its seq and epsilon_spent, re-read the journal, skip this tick.
- Pause fence: a heartbeat task notices when the event loop was stalled for more than half the
  session timeout (SIGSTOP, a frozen VM, a long GC). The group may have moved on without us:
  releases are held for a few heartbeat intervals (time to learn of the rebalance) and the
  journal is re-read before the next one.
Remaining window: a publish by another owner that lands between our drain and our send (a few
ms) is not seen; both may then publish the same seq with different values. Closing it needs
transactions or a conditional append, which tansu does not offer (see the shared broker notes);
the group protocol makes two owners a transient, and the fences make the window small.

Broker trouble: every broker call is bounded in time; a producer or journal consumer that saw an
error is dropped and recreated on the next tick; errors count in pufferfish_broker_errors_total.
The release lock is never waited for: a tick that finds it taken is skipped.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from fractions import Fraction
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from pydantic import ValidationError

from core.budget import Accountant, BudgetExhausted, composition_charge
from core.noise import secure_laplace_release
from stream_app.metrics import Metrics
from stream_app.models import Partial, Release, to_bytes
from stream_app.release_state import LocalState, load_state, save_state, state_path
from stream_app.settings import Settings

log = logging.getLogger(__name__)

JOURNAL_READ_LIMIT_SECONDS = 30.0  # whole read, however long the journal
JOURNAL_STALL_SECONDS = 5.0  # behind the end and no new record for this long: give up
BROKER_CALL_SECONDS = 10.0  # any single broker call (start, end_offsets, position, stop)
FENCE_DRAIN_MS = 100
BEAT_SECONDS = 0.25
SEND_TIMEOUT_MS = 15000
# Safety net over a whole tick (journal read + send); a cancelled send burns its seq.
TICK_LIMIT_SECONDS = JOURNAL_READ_LIMIT_SECONDS + SEND_TIMEOUT_MS / 1000 + 4 * BROKER_CALL_SECONDS

T = TypeVar("T")


class JournalError(RuntimeError):
    """The releases journal could not be read to its end in time."""


_abandoned: set[asyncio.Future[Any]] = set()  # referenced until they end


async def _bounded(aw: Awaitable[T], what: str, seconds: float = BROKER_CALL_SECONDS) -> T:
    """Await with a time bound that holds even if the call ignores cancellation.

    asyncio.wait_for waits for the cancelled call to finish; aiokafka's producer send and stop
    can hang on a dead connection (aio-libs/aiokafka#1101), so a late call is cancelled and
    left behind instead of awaited.
    """
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        _abandoned.add(task)
        task.add_done_callback(_abandoned.discard)
        raise JournalError(f"{what}: no answer in {seconds:g} s")
    if task.cancelled():
        # aiokafka cancels its own futures when a connection dies; escaping as CancelledError,
        # that would end the Faust timer task for good (the release stall after a broker restart)
        raise JournalError(f"{what}: cancelled inside the Kafka client")
    return task.result()


async def _quietly(aw: Awaitable[object], what: str) -> None:
    """Stop a client that is being dropped: bounded, errors ignored."""
    try:
        await _bounded(aw, what)
    except Exception:  # noqa: BLE001 - it is being dropped anyway
        pass


def _parse(value: bytes | None, offset: int) -> Release | None:
    try:
        return Release.model_validate_json(value or b"")
    except ValidationError:
        log.warning("journal: skipping an unparseable record at offset %d", offset)
        return None


class Journal:
    """A consumer pinned to the releases partition: full reads and the fence drain."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.tp = TopicPartition(settings.topic_releases, 0)
        self._consumer: AIOKafkaConsumer | None = None

    async def _get(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                **self.settings.aiokafka_kwargs(), group_id=None, enable_auto_commit=False,
                auto_offset_reset="earliest",
            )
            try:
                await _bounded(consumer.start(), "journal consumer start")
                consumer.assign([self.tp])
            except BaseException:
                await self._stop(consumer)
                raise
            self._consumer = consumer
        return self._consumer

    @staticmethod
    async def _stop(consumer: AIOKafkaConsumer) -> None:
        await _quietly(consumer.stop(), "journal consumer stop")

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await self._stop(consumer)

    async def read_all(self) -> list[Release]:
        """Every parseable record from the start, leaving the position at the end (bounded)."""
        s = self.settings
        try:
            consumer = await self._get()
            tp = self.tp
            if not await _bounded(consumer.seek_to_beginning(tp), "journal seek"):
                raise JournalError("releases journal: the seek to the beginning did not finish")
            # tansu reports the start of the last batch as the end: also wait for quiet.
            end = (await _bounded(consumer.end_offsets([tp]), "journal end offset"))[tp]
            out: list[Release] = []
            started = last_data = time.monotonic()
            while True:
                batch = await _bounded(consumer.getmany(tp, timeout_ms=200), "journal fetch")
                for rec in batch.get(tp, []):
                    last_data = time.monotonic()
                    release = _parse(rec.value, rec.offset)
                    if release is not None:
                        out.append(release)
                position = await _bounded(consumer.position(tp), "journal position")
                now = time.monotonic()
                if position >= end and now - last_data >= s.journal_quiet_seconds:
                    return out
                if position < end and now - last_data > JOURNAL_STALL_SECONDS:
                    raise JournalError(f"releases journal stalled at offset {position} < {end}")
                if now - started > JOURNAL_READ_LIMIT_SECONDS:
                    raise JournalError(
                        f"releases journal not read to its end in {JOURNAL_READ_LIMIT_SECONDS:g} s")
        except BaseException:
            await self.close()
            raise

    async def drain(self) -> list[Release]:
        """Records published since the last read, up to the log end the broker reports now.

        Enough to see any other publisher: tansu's ListOffsets may answer the start of the last
        batch + 1 instead of the log end (shared broker notes), but even then the first record
        of every batch, and so of every foreign publication, lies below the reported end.
        """
        try:
            consumer = await self._get()
            tp = self.tp
            end = (await _bounded(consumer.end_offsets([tp]), "journal end offset"))[tp]
            out: list[Release] = []
            started = time.monotonic()
            while True:
                position = await _bounded(consumer.position(tp), "journal position")
                if position >= end:
                    return out
                batch = await _bounded(
                    consumer.getmany(tp, timeout_ms=FENCE_DRAIN_MS), "journal fetch")
                recs = batch.get(tp, [])
                out.extend(r for r in (_parse(x.value, x.offset) for x in recs) if r is not None)
                if time.monotonic() - started > JOURNAL_STALL_SECONDS:
                    raise JournalError(f"releases journal stalled at offset {position} < {end}")
        except BaseException:
            await self.close()
            raise


async def read_journal(settings: Settings) -> list[Release]:
    """Every parseable release record, in log order (bounded in time)."""
    journal = Journal(settings)
    try:
        return await journal.read_all()
    finally:
        await journal.close()


def combine(partials: Mapping[int, Partial]) -> tuple[int, float, float, str | None, float]:
    """(sum in grid units, max theta, max spread, binding pair, newest ts) over partitions."""
    total = sum(p.sum_units for p in partials.values())
    theta = max((p.theta for p in partials.values()), default=0.0)
    spread = max((p.spread for p in partials.values()), default=0.0)
    binding = next((p.binding_pair for p in partials.values() if p.theta == theta), None)
    newest = max((p.newest_ts for p in partials.values()), default=0.0)
    return total, theta, spread, binding, newest


def _accountant_at_least(total: float, spent: float) -> Accountant:
    """An accountant that has spent `spent` (one float charge); BudgetExhausted if over total."""
    accountant = Accountant(total)
    if spent > 0:
        accountant.spend(spent)
    return accountant


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
        self._journal = Journal(settings)
        self.state_file = state_path(settings)
        self._local = load_state(self.state_file)  # corrupt -> PufferfishInputError at start
        self.accountant = Accountant(settings.budget_total)
        self.last_seq = 0
        self.synced = False
        self.exhausted = False
        self._generation = 0
        self._own: dict[int, float] = {}  # seq -> ts of records this worker sent since the sync
        self._events_since_release = 0
        self._said_zero_theta = False
        self._beat_task: asyncio.Task[None] | None = None
        self._last_beat = time.monotonic()
        self._hold_until = 0.0

    # --- lifecycle ---------------------------------------------------------------------------
    def invalidate(self) -> None:
        """Ownership may have changed: re-read the journal before the next release."""
        self.synced = False
        self._generation += 1

    async def stop(self) -> None:
        if self._beat_task is not None:
            self._beat_task.cancel()
            self._beat_task = None
        await self._drop_producer()
        await self._journal.close()

    async def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await _quietly(producer.stop(), "release producer stop")

    # --- pause fence -------------------------------------------------------------------------
    @property
    def _pause_limit(self) -> float:
        return self.settings.broker_session_timeout / 2

    def _ensure_beat(self) -> None:
        if self._beat_task is None or self._beat_task.done():
            self._last_beat = time.monotonic()
            self._beat_task = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(BEAT_SECONDS)
            self._check_pause()

    def _check_pause(self) -> None:
        now = time.monotonic()
        stalled = now - self._last_beat
        self._last_beat = now
        if stalled > self._pause_limit:
            s = self.settings
            hold = 3 * s.broker_heartbeat_interval + s.journal_quiet_seconds
            self._hold_until = max(self._hold_until, now + hold)
            self.invalidate()
            log.warning("event loop stalled %.1f s (over half the session timeout): releases "
                        "held %.1f s, then the journal is re-read", stalled, hold)

    # --- journal -----------------------------------------------------------------------------
    async def _sync(self) -> None:
        generation = self._generation
        records = await self._journal.read_all()
        s = self.settings
        seq_journal = max((r.seq for r in records), default=0)
        spent_journal = max((r.epsilon_spent for r in records), default=0.0)
        local = self._local = self._newer(self._local, load_state(self.state_file))
        self.last_seq = max(seq_journal, local.last_seq if local else 0, self.last_seq)
        best = self.accountant
        if local is not None and local.accountant.spent > best.spent:
            best = local.accountant
        self.exhausted = False
        if spent_journal > best.spent:
            try:
                best = _accountant_at_least(s.budget_total, spent_journal)
            except BudgetExhausted:
                self._mark_exhausted("the journal already spent more than budget_total")
        if best.total != s.budget_total:  # budget_total was changed: replay the exact charges
            rebased = Accountant(s.budget_total)
            try:
                for charge in best.charges:
                    rebased.spend(charge)
                best = rebased
            except BudgetExhausted:
                self._mark_exhausted("the recorded spending exceeds the new budget_total")
        self.accountant = best
        self.metrics.epsilon_spent.set(max(best.spent, spent_journal))
        self.metrics.epsilon_remaining.set(max(best.remaining, 0.0))
        if records:
            self.metrics.theta.set(records[-1].theta)
        self._own.clear()
        self.synced = generation == self._generation
        log.info("journal restored: last seq %d, epsilon spent %g (journal: seq %d, spent %g)",
                 self.last_seq, best.spent, seq_journal, spent_journal)

    @staticmethod
    def _newer(mine: LocalState | None, on_disk: LocalState | None) -> LocalState | None:
        """The file may have been written by another worker sharing data_dir: keep the max."""
        if mine is None or on_disk is None:
            return mine or on_disk
        if on_disk.accountant.spent > mine.accountant.spent:
            return LocalState(max(mine.last_seq, on_disk.last_seq), on_disk.accountant,
                              on_disk.last_release)
        return LocalState(max(mine.last_seq, on_disk.last_seq), mine.accountant,
                          mine.last_release)

    async def _fence(self) -> bool:
        """True when nobody else has published since our last read of the journal."""
        foreign = [r for r in await self._journal.drain() if self._own.get(r.seq) != r.ts]
        if not foreign:
            return True
        newest = max(foreign, key=lambda r: r.seq)
        self.last_seq = max(self.last_seq, newest.seq)
        spent = max(r.epsilon_spent for r in foreign)
        if spent > self.accountant.spent:
            try:
                self.accountant = _accountant_at_least(self.settings.budget_total, spent)
            except BudgetExhausted:
                self._mark_exhausted("another worker spent the budget")
        self.invalidate()
        log.warning("another worker published seq %d: this tick is skipped and the journal "
                    "is re-read", newest.seq)
        return False

    def _mark_exhausted(self, why: str) -> None:
        if not self.exhausted:
            log.warning("privacy budget exhausted (%s): releases stop", why)
        self.exhausted = True
        self.metrics.budget_exhausted.set(1)

    # --- releasing ---------------------------------------------------------------------------
    async def count_events(self, n: int) -> None:
        """Called for every partial: release early after release_every_events new events."""
        every = self.settings.release_every_events
        self._events_since_release += n
        if every is not None and self._events_since_release >= every:
            await self.release_once()

    async def release_once(self) -> Release | None:
        if self._lock.locked():
            return None  # a release or a journal read is running: never queue behind it
        async with self._lock:
            self._ensure_beat()
            self._check_pause()
            if not self._is_owner() or time.monotonic() < self._hold_until:
                return None
            try:
                return await _bounded(self._tick(), "release tick", TICK_LIMIT_SECONDS)
            except Exception as exc:  # noqa: BLE001 - broker trouble: retry on the next tick
                self.metrics.broker_errors.inc()
                self.invalidate()
                log.error("release tick failed (%s: %s); retrying on the next tick",
                          type(exc).__name__, exc)
                return None

    async def _tick(self) -> Release | None:
        if not self.synced:
            await self._sync()
            if not self.synced or not self._is_owner():
                return None
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
        if not self.accountant.can_spend(charge):
            self._mark_exhausted(f"a release would cost {charge:g}")
            return None
        producer = await self._get_producer()  # no charge while the broker is unreachable
        self._check_pause()
        if time.monotonic() < self._hold_until or not await self._fence():
            return None
        # Draw, charge, record the intent, send. A failure before the intent is written costs
        # nothing (the value was never sent); after it, the seq is burnt and the charge kept.
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
        self._local = LocalState(self.last_seq, self.accountant, record)
        try:
            save_state(self.state_file, self._local)
        except OSError as exc:
            log.error("release seq %d not sent: the local budget file could not be written "
                      "(%s); seq skipped", record.seq, type(exc).__name__)
            return None
        self._own[record.seq] = record.ts
        for old_seq in [q for q in self._own if q < record.seq - 64]:
            del self._own[old_seq]  # a re-sent copy of an own record comes right after it
        self.metrics.epsilon_spent.set(record.epsilon_spent)
        self.metrics.epsilon_remaining.set(record.epsilon_remaining)
        try:
            # aiokafka can keep retrying a batch whose connection died: bound the wait too
            await _bounded(
                producer.send_and_wait(s.topic_releases, to_bytes(record), partition=0),
                "release send", SEND_TIMEOUT_MS / 1000 + BROKER_CALL_SECONDS,
            )
        except Exception as exc:  # noqa: BLE001 - broker trouble must not kill the worker
            self.metrics.broker_errors.inc()
            await self._drop_producer()
            log.error("release seq %d not acknowledged (%s); seq skipped", record.seq,
                      type(exc).__name__)
            return None
        self._events_since_release = 0
        self.metrics.releases.inc()
        self.metrics.theta.set(theta)
        if newest > 0 and math.isfinite(newest):
            self.metrics.release_lag_seconds.observe(max(record.ts - newest, 0.0))
        return record

    async def _get_producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            producer = AIOKafkaProducer(
                **self.settings.aiokafka_kwargs(), acks="all", linger_ms=0,
                request_timeout_ms=SEND_TIMEOUT_MS,
            )
            try:
                await _bounded(producer.start(), "release producer start")
            except BaseException:
                await _quietly(producer.stop(), "release producer stop")
                raise
            self._producer = producer
        return self._producer
