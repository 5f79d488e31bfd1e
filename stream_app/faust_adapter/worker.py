"""The Faust worker: topics, tables, agents and timers of one worker process.

Flow: reports + membership (co-partitioned, key user_id) -> ``process`` (one agent, batches,
stream_app.domain.ingest) -> users table (changelog) + per-partition aggregates in memory -> every
``partials_interval`` the owner of each input partition publishes its Partial to
``topic_partials`` (1 partition) -> ``collect`` (on the single owner of that partition) keeps
the latest Partial per input partition -> the release timer on that worker (the public
clock, stream_app.release) publishes a learning round when one is due, then a noisy sum.

Delivery semantics (at-least-once; tansu has no transactions): reports are idempotent by
report_id within the user's last ``dedup_window`` ids; membership events set presence
absolutely, so replaying a suffix of the log ends in the same state; the two input topics are
not ordered with respect to each other; "latest value" is the report with the newest ``ts``.
A batch's records are acked (their offsets may be committed) only after the broker acknowledged
every changelog and dead-letter record the batch produced (stream_app/faust_adapter/write_acks.py).
A record
it did not acknowledge stops the worker (exit status 75) with the batch's records never acked,
so its offsets are not committed and a restart processes the batch again (docs/design.md,
"Delivery semantics").

Hot path (docs/design.md, "Throughput"): a batch of up to ``batch_max_events`` records; each
touched user is decoded once from the store, written once to the store (``users.data``: no
per-write Faust bookkeeping) and sent once to the table's changelog with ``app.producer.send``
on the user's input partition (the partition Faust itself would use); the batch's sends are
awaited together, before the batch is acked.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import weakref
from collections.abc import Sequence
from typing import Any

import faust
import orjson
from faust.stores.memory import Store as MemoryTableStore
from faust.streams import _current_event
from faust.types import TP

from stream_app.domain.aggregate import PartitionAggregate
from stream_app.domain.batch import DeadLetters
from stream_app.domain.draft import Stored
from stream_app.domain.ingest import Ingest
from stream_app.domain.models import Partial, dead_letter, to_bytes
from stream_app.domain.priors import checked_start
from stream_app.domain.rules import EventRules
from stream_app.domain.state import UserState
from stream_app.faust_adapter.app import app_options, new_app
from stream_app.faust_adapter.write_acks import (
    PendingWrites,
    WriteNotAcknowledged,
    first_offsets,
    hold_back,
)
from stream_app.kafka.clients import faust_credentials
from stream_app.metrics import Metrics
from stream_app.release import Releaser
from stream_app.settings import Settings

log = logging.getLogger(__name__)

def freeze_startup_heap() -> None:
    """Keep the objects alive once the app is built (modules, the Faust app: ~120,000) out of
    every later collection: ``gc.collect()``, then ``gc.freeze()``. A full collection used to
    traverse them all again (throughput bench: 9 of them, 0.46 s of the worker's 9 s CPU, 52 ms
    each). Then a young generation of GC_YOUNG_THRESHOLD objects instead of 700: a batch
    allocates a few containers per record (drafts, lists, tuples, Faust's events), most of
    them garbage by the end of the batch, and collecting every 700 allocations promoted and
    re-scanned them (ingest micro-benchmark: 8 % of its time). Once per process; only cyclic
    garbage among the frozen objects would stay (they live as long as the process). Before
    the agents start: their coroutines stay visible to ``gc.get_objects()``
    (stream_app/faust_adapter/diagnostics.py lists them)."""
    global _HEAP_FROZEN
    if not _HEAP_FROZEN:
        _HEAP_FROZEN = True
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


GC_YOUNG_THRESHOLD = 10_000
_HEAP_FROZEN = False


def partials_interval(settings: Settings) -> float:
    return min(0.25, settings.release_period_seconds / 4)


def held_sweep_interval(settings: Settings) -> float:
    """How often held reports are checked for an expired grace (a few times per grace)."""
    return min(5.0, max(0.2, settings.join_grace_seconds / 4))


class PufferfishApp:
    """Builds and wires the Faust app for one worker process."""

    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        self.settings = s = settings
        self.metrics = metrics or Metrics.create()
        self.priors, plan = checked_start(s)  # bad priors/pairs fail here, before any I/O
        self.rules = EventRules(
            domain=s.domain, grid_log2=s.grid_log2, dedup_window=s.dedup_window,
            auto_join=s.auto_join, known_groups=self.priors.groups,
            default_group=self.priors.default_group,
        )
        self.aggregates: dict[int, PartitionAggregate] = {}
        self.ingest = Ingest(s, self.rules, self.metrics, self)
        self.app = app = new_app(
            s, s.app_id, broker=s.broker, broker_credentials=faust_credentials(s), store=s.store,
            datadir=str(s.data_dir), web_enabled=s.web_port is not None, web_bind=s.web_host,
            web_port=s.web_port or 6066, web_host=s.web_host, **app_options(s),
        )
        raw: dict[str, Any] = dict(
            key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )
        # one topic for both kinds is allowed (then Kafka orders a user's records itself)
        self.inputs = app.topic(*dict.fromkeys((s.topic_reports, s.topic_membership)),
                                partitions=s.input_partitions, **raw)
        self.partials_topic = app.topic(s.topic_partials, partitions=1, **raw)
        self.deadletter_topic = app.topic(s.topic_deadletter, partitions=1, **raw)
        json_schema: Any = faust.Schema(key_serializer="json", value_serializer="json")
        # Values are UserState.to_bytes() (JSON text, the same on the wire as before): the
        # store keeps one bytes object per user, recovery stores the changelog's bytes as is.
        users_schema: Any = faust.Schema(key_serializer="json", value_serializer="raw")
        self.users = app.Table("users", default=None, partitions=s.input_partitions,
                               schema=users_schema)
        # the input batch whose writes are in flight (the held-report expiry waits for it)
        self._inflight: asyncio.Future[None] | None = None
        # (user_id, value, input partition) of this batch's writes, sent by _send_changelog
        self._writes: list[tuple[str, bytes, int]] = []
        # set when a batch's record was not acknowledged: the worker stops (runner: exit 75)
        self.write_failure: WriteNotAcknowledged | None = None
        self.partials = app.Table("partials", default=None, partitions=1, schema=json_schema)
        self.releaser = Releaser(s, self.metrics, self.priors, self.latest_partials,
                                 self.owns_release)
        self.metrics.theta.set(plan.theta)
        self.metrics.reports_held_limit.labels(scope="user").set(s.max_held_reports_per_user)
        self.metrics.reports_held_limit.labels(scope="worker").set(s.max_held_reports)

        app.agent(self.inputs, name="process")(self._process)
        app.agent(self.partials_topic, name="collect")(self._collect)
        app.timer(partials_interval(s), name="publish_partials")(self._publish_partials)
        app.timer(s.release_period_seconds, name="release")(self._release_tick)
        app.timer(held_sweep_interval(s), name="expire_held")(self._expire_held)
        app.on_partitions_revoked.connect(self._on_rebalance)  # type: ignore[arg-type]
        app.on_partitions_assigned.connect(self._on_rebalance)  # type: ignore[arg-type]
        app.on_before_shutdown.connect(self._on_shutdown)  # type: ignore[arg-type]
        # the modules and the app are built: they live as long as the process
        freeze_startup_heap()

    # --- ownership and rebalancing -------------------------------------------------------
    def _assigned(self) -> set[TP]:
        try:
            return set(self.app.assignor.assigned_actives())
        except Exception:  # noqa: BLE001 - no assignment yet
            return set()

    def _ready(self) -> bool:
        """Tables recovered and no rebalance or recovery running (then the state is whole)."""
        recovery = self.app.tables.recovery  # type: ignore[attr-defined]
        busy = self.app.rebalancing or getattr(self.app, "in_recovery", False)
        return bool(recovery.completed.is_set()) and not busy

    def owns_release(self) -> bool:
        return self._ready() and TP(self.settings.topic_partials, 0) in self._assigned()

    async def _on_rebalance(self, app: Any, tps: set[TP], **kwargs: Any) -> None:
        self.aggregates.clear()
        self.releaser.invalidate()

    async def _on_shutdown(self, app: Any, **kwargs: Any) -> None:
        await self.releaser.stop()

    # --- the user store (ingest.UserStore) -----------------------------------------------
    # load/save work on the table's store directly; save also queues the user's changelog record
    # (sent by _send_changelog before the batch is acked). A RocksDB store picks its partition
    # database from Faust's current event, a context variable: we set it to the record's event.
    def _set_event(self, event: Any) -> None:
        if not isinstance(self.users.data, MemoryTableStore):
            _current_event.set(weakref.ref(event))

    def load(self, user_id: str, event: Any) -> Stored | None:
        self._set_event(event)
        return self.users.data.get(user_id)

    def save(self, user_id: str, value: bytes, event: Any) -> None:
        """``value``: ``UserState.to_bytes()``."""
        self._set_event(event)
        self.users.data[user_id] = value
        self._writes.append((user_id, value, event.message.partition))

    def aggregate(self, partition: int, event: Any = None) -> PartitionAggregate:
        agg = self.aggregates.get(partition)
        if agg is None:
            users = [(k, UserState.from_stored(v)) for k, v in self.users.data.items()
                     if v is not None]
            agg = self.aggregates[partition] = PartitionAggregate.rebuild(partition, users)
        return agg

    def held_total(self) -> int:
        return sum(agg.held_count for agg in self.aggregates.values())

    # --- input agent ----------------------------------------------------------------------
    async def _process(self, stream: Any) -> None:
        # Faust's worker leaves the root logger at DEBUG (its spinner): every debug call of
        # Faust and aiokafka would build a record (measured -19 %). Reset it to ours.
        logging.getLogger().setLevel(self.settings.log_level.upper())
        s = self.settings
        # take_events acks a batch's events (so their offsets may be committed) when we ask
        # for the next batch, or when the generator is closed (its ``finally``). Each batch
        # holds one more reference of its own (hold_back), released only once the broker has
        # acknowledged all of the batch's writes: so the next batch is collected and applied
        # while the previous one's writes are in flight (one batch at most, in order), and a
        # batch whose writes did not all succeed never reaches the consumer's acks.
        inflight: asyncio.Future[None] | None = None
        try:
            async for events in stream.take_events(s.batch_max_events, s.batch_within_seconds):
                letters = self.handle_batch(events)
                changes = self._take_writes()  # this batch's (timers add others)
                hold_back(events)
                if inflight is not None:
                    await inflight  # the previous batch's writes first (their order)
                inflight = self._inflight = asyncio.ensure_future(
                    self._write_then_release(letters, changes, events))
            if inflight is not None:
                await inflight
        except BaseException:
            if inflight is not None and not inflight.done():
                inflight.cancel()  # its events stay held back: processed again after a restart
            raise

    async def _write_then_release(self, letters: DeadLetters,
                                  changes: list[tuple[str, bytes, int]],
                                  events: Sequence[Any]) -> None:
        """Write a batch, then release its events (their offsets may be committed); a write
        not acknowledged stops the worker with the batch held back."""
        try:
            await self._write_batch(letters, changes)
        except WriteNotAcknowledged as exc:
            await self._stop_on_lost_write(exc, events)
            return
        for event in events:
            event.ack()

    def handle_batch(self, events: Sequence[Any]) -> DeadLetters:
        token = _current_event.set(None)
        try:
            return self.ingest.handle_batch(events)
        finally:
            _current_event.reset(token)

    async def _write_batch(self, letters: DeadLetters,
                           changes: list[tuple[str, bytes, int]] | None = None) -> None:
        """Send the batch's dead letters, then its changelog records, and wait until the broker
        has acknowledged every one; WriteNotAcknowledged otherwise. Dead letters are
        acknowledged first: a user's stored state records the input offsets it reflects (a
        replay skips them), so a dead letter must be written before that state is, or a crash
        between the two would lose it (at least once, as before offsets were recorded)."""
        if changes is None:
            changes = self._take_writes()
        writes = PendingWrites()
        if letters:
            await writes.issue("dead letter", self._send_dead_letters(letters))
            await writes.acknowledged()
        await writes.issue("changelog", self._send_changelog(changes))
        results = await writes.acknowledged()
        if results.get("changelog"):
            self._changelog_persisted(results["changelog"])

    def _take_writes(self) -> list[tuple[str, bytes, int]]:
        """The user writes queued since the last call (their changelog records are owed)."""
        writes, self._writes = self._writes, []
        return writes

    async def _send_changelog(self, writes: list[tuple[str, bytes, int]]) -> list[Any]:
        """One changelog record per user written in the batch (its last value), on the user's
        input partition: what ``users[k] = v`` would send, without its per-write overhead.
        Returns the sends' futures."""
        if not writes:
            return []
        # a user's records in one batch span two partitions only when its key moved
        # (ingest replays them): one record per (user, partition), the last value of each
        last = {(user_id, partition): value for user_id, value, partition in writes}
        topic = self.users.changelog_topic.get_topic_name()
        send = self.app.producer.send
        return [await send(topic, orjson.dumps(user_id), value, partition, None, None)
                for (user_id, partition), value in last.items()]

    def _changelog_persisted(self, results: Sequence[Any]) -> None:
        """What Faust's table does: a persistent store (RocksDB) records the changelog offset
        (the newest of each changelog partition)."""
        store: Any = self.users.data
        for tp, offset in {res.topic_partition: res.offset for res in results}.items():
            store.set_persisted_offset(tp, offset)

    async def _send_dead_letters(self, letters: DeadLetters) -> list[Any]:
        """Queue the dead letters; returns the sends' futures."""
        now = time.time()
        sends = [
            self.deadletter_topic.send(value=to_bytes(dead_letter(
                letter.topic, letter.raw, letter.reason, now, partition=letter.partition,
                offset=letter.offset, detail=letter.detail)))
            for letter in letters
        ]
        return list(await asyncio.gather(*sends))

    async def _stop_on_lost_write(self, exc: WriteNotAcknowledged, events: Sequence[Any]
                                  ) -> None:
        """Stop the worker, non-zero (mode's crash: the worker stops, then exits 1; the
        runner makes it 75). Faust commits acked offsets when it stops; the held-back batch is
        never acked, so the commit ends before it. Waits until the shutdown cancels the agent:
        asking for the next batch would ack this one."""
        self.write_failure = exc
        self.metrics.broker_errors.inc()
        log.error("stopping the worker: %s; the input offsets from %s are not committed and "
                  "are processed again after a restart", exc, first_offsets(events))
        await self.app.crash(exc)
        await asyncio.Event().wait()

    async def _expire_held(self) -> None:
        """Dead-letter (not_present) the held reports whose join_grace_seconds passed, on
        this worker's input partitions; the users are written without them first."""
        if not self._ready():
            return
        # after the input batch in flight: a user's record from it must not follow this one
        while self._inflight is not None and not self._inflight.done():
            await asyncio.wait([self._inflight])
        partitions = sorted(tp.partition for tp in self._assigned()
                            if tp.topic == self.settings.topic_reports)
        token = _current_event.set(None)
        try:
            letters = self.ingest.expire_held(partitions)
        finally:
            _current_event.reset(token)
        try:
            await self._write_batch(letters)
        except WriteNotAcknowledged as exc:  # the expiry is redone from the recovered state
            await self._stop_on_lost_write(exc, ())

    # --- partials and ticks ---------------------------------------------------------------
    async def _publish_partials(self) -> None:
        if not self._ready():
            return
        for tp in sorted(self._assigned()):
            if tp.topic != self.settings.topic_reports:
                continue
            try:
                agg = self.aggregate(tp.partition)
                if not agg.dirty:
                    continue
                partial = Partial(partition=tp.partition, sum_units=agg.sum_units,
                                  group_units=agg.group_units, newest_ts=agg.newest_ts)
                agg.dirty = False
                await self.partials_topic.send(key=b"partial", value=to_bytes(partial))
            except Exception as exc:  # noqa: BLE001
                self.aggregates.pop(tp.partition, None)  # rebuilt (and re-sent) next tick
                self.metrics.broker_errors.inc()
                log.error("partial not sent (%s)", type(exc).__name__)

    async def _collect(self, stream: Any) -> None:
        async for event in stream.events():
            try:
                partial = Partial.model_validate_json(event.message.value or b"")
            except ValueError:
                log.warning("ignoring a malformed partial")
                continue
            self.partials[str(partial.partition)] = partial.model_dump()

    def latest_partials(self) -> dict[int, Partial]:
        return {int(k): Partial.model_validate(v) for k, v in self.partials.items()
                if v is not None}

    async def _release_tick(self) -> None:
        try:
            await self.releaser.on_clock()
        except Exception as exc:  # noqa: BLE001 - retry on the next tick
            self.metrics.broker_errors.inc()
            log.error("release tick failed (%s: %s)", type(exc).__name__, exc)
