"""The worker's Faust consumer: its own drain loop and a setting Faust does not expose
(docs/design.md, "Throughput" and "Records are handed over in offset order").

The drain loop replaces Faust's ``Consumer._drain_messages``: it hands a fetched record to the
conductor only at the offset its partition expects next, and fetches again a record whose
hand-off a rebalance abandoned (offsets.py says why Faust's loop loses those).

The client reads committed records only (isolation.py), whatever Faust's processing guarantee.

``consumer_fetch_max_wait_seconds``: how long the broker may hold a fetch that finds no new
record. Faust hard-codes 1.5 s; a real Kafka answers as soon as a record arrives, but a broker
that does not (tansu) holds every idle fetch that long, and a record then waits up to 1.5 s on
each hop (input topic, partials topic) before a release can include it.

Each record is handed over by handoff.py (inline, abandoned on a rebalance); the fetch is
Faust's ``getmany`` minus its silent drops (fetch.py).

Offset gaps (compaction, transaction markers) are handed over past without a seek unless the
partition was sought since its batch's fetch began (offsets.py). A stall watch seeks back a
partition whose records the client consumed but never handed over; it stays out of the way of
a hand-off in progress, so it never makes the loop hand a record over twice. Every
seek the consumer makes of its own counts in ``pufferfish_consumer_seeks_total``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from faust.transport.consumer import CONSUMER_FETCHING, ensure_TP
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.transport.drivers.aiokafka import Transport as AIOKafkaTransport
from faust.types import TP
from mode import Service

from stream_app.faust_adapter.alignment import Alignment
from stream_app.faust_adapter.client_view import FetchedRecords, client_views
from stream_app.faust_adapter.commit_guard import CommitGuard
from stream_app.faust_adapter.fetch import RefetchingGetmany
from stream_app.faust_adapter.flow_stop import FlowStopHooks
from stream_app.faust_adapter.gaps import CheapGaps
from stream_app.faust_adapter.gated_batches import GatedBatches
from stream_app.faust_adapter.handoff import GuardedHandOff
from stream_app.faust_adapter.isolation import read_committed
from stream_app.faust_adapter.offsets import ExpectedOffsets
from stream_app.metrics import CONSUMER_SEEKS

logger = logging.getLogger(__name__)

STALL_CHECK_SECONDS = 5.0  # two checks in a row without a hand-off: fetch the partition again


@dataclass(frozen=True)
class ConsumerTuning:
    fetch_max_wait_ms: int = 1500  # Faust's own value
    aligned_topics: tuple[str, str] | None = None  # (reports, membership) when two topics


def tuning_of(app: Any) -> ConsumerTuning:
    return getattr(app, "consumer_tuning", None) or ConsumerTuning()


class TunedConsumerThread(AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # both read by AIOKafkaConsumer.start() when it builds its Fetcher (not started yet here)
        consumer._fetch_max_wait_ms = tuning_of(self.app).fetch_max_wait_ms
        read_committed(consumer)  # not Faust's read_uncommitted (isolation.py)
        return consumer

    async def _fetch_records(self, consumer: Any, active_partitions: Any,
                             timeout: float | None = None,
                             max_records: int | None = None) -> Any:
        """Faust's, plus the client's view of every assigned partition right after the fetch
        (in the client's thread, so it matches the records returned)."""
        records = await super()._fetch_records(consumer, active_partitions, timeout=timeout,
                                               max_records=max_records)
        return FetchedRecords(records, client_views(consumer))


class PufferfishConsumer(CommitGuard, FlowStopHooks, RefetchingGetmany, GuardedHandOff,
                         CheapGaps, GatedBatches, AIOKafkaConsumer):
    """Faust's aiokafka consumer with the worker's own drain loop (offsets.py: records are
    handed over in offset order, an abandoned hand-off is fetched again; alignment.py: the
    two input topics merged by timestamp)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        pair = tuning_of(self.app).aligned_topics
        self._gate = Alignment(*pair) if pair else None
        self._expected = ExpectedOffsets(on_moved=self._gate.forget if self._gate else None)

    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return TunedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    # --- every seek tells the drain loop where the partition's next record is -----------------
    async def seek(self, partition: TP, offset: int) -> None:
        await super().seek(partition, offset)
        self._expected.sought(ensure_TP(partition), offset)

    async def seek_wait(self, partitions: Mapping[TP, int]) -> None:
        for tp in partitions:  # the seeks run in the client's thread, at a moment unknown here
            self._expected.seek_begins(ensure_TP(tp))
        try:
            await super().seek_wait(partitions)
        finally:
            for tp, offset in partitions.items():
                self._seek_ended(ensure_TP(tp), offset, True)

    async def seek_to_committed(self) -> Mapping[TP, int]:
        assigned = {ensure_TP(tp) for tp in self.assignment()}
        for tp in assigned:
            self._expected.seek_begins(tp)
        committed: Mapping[TP, int] = {}
        try:
            committed = await super().seek_to_committed()
        finally:
            moved = {ensure_TP(tp): o for tp, o in committed.items() if o and o > 0}
            for tp in assigned | set(moved):  # aiokafka seeks only those with an offset > 0
                self._seek_ended(tp, moved.get(tp), tp in moved)
        return committed

    def _seek_ended(self, tp: TP, offset: int | None, moved: bool) -> None:
        again = self._expected.seek_ended(tp, offset, moved)
        if again is not None:
            self._seek_back(tp, again, "records came back while a seek ran in the client thread")

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        for tp in revoked:
            self._expected.forget(tp)
        await super().on_partitions_revoked(revoked)

    # --- the drain loop (replaces Faust's Consumer._drain_messages) -------------------------
    async def _drain_messages(self, fetcher: Any) -> None:
        gate = self._gate
        partner = gate.partner if gate is not None else {}
        seeking = self._expected.seeking
        should_stop, fetcher_should_stop = self._stopped.is_set, fetcher._stopped.is_set
        since_yield = 0
        try:
            while not (should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                self._last_fetch = None
                batch = self.getmany(timeout=1.0)
                await self.sleep(0)  # getmany may not release the loop (as in Faust)
                if self.should_stop:
                    continue
                skip: set[TP] = set()  # partitions sought back during this batch
                stamp = self._expected.fetch_stamp()  # the fetch begins with the iteration
                async for tp, message in batch:
                    since_yield += 1
                    if since_yield > 100:
                        await asyncio.sleep(0)
                        since_yield = 0
                    if tp in skip:
                        continue
                    other = partner.get(tp) if partner else None
                    if other is None or seeking(tp):
                        # not gated, or a seek of tp runs in the client thread: judged now
                        # (skipped and fetched again after the seek), never kept by the gate,
                        # which drops its records at the seek's end (offsets.py, ``seeking``)
                        await self._offer(tp, message, stamp, skip)
                        continue
                    key = gate.key(tp, message.timestamp)  # type: ignore[union-attr]
                    if not gate.admits(tp, other, key):  # type: ignore[union-attr]
                        gate.hold(tp, message, stamp, key)  # type: ignore[union-attr]
                        if other in gate.held:  # type: ignore[union-attr]
                            await self._release(other, skip)  # both heads known
                        continue
                    if await self._offer(tp, message, stamp, skip):
                        gate.handed_over(tp, key)  # type: ignore[union-attr]
                        if other in gate.held:  # type: ignore[union-attr]
                            await self._release(other, skip)
                await self._settle(stamp, skip)
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    @Service.task
    async def _watch_for_lost_records(self) -> None:
        """Every STALL_CHECK_SECONDS: seek back a partition whose records the Kafka client
        consumed but that never reached the drain loop (faust_offsets.ExpectedOffsets.stalled).
        Never while a hand-off is in progress: the record being handed over would be fetched
        again and, its hand-off then completing, handed over a second time."""
        while not self.should_stop:
            await self.sleep(STALL_CHECK_SECONDS)
            if not self.flow_active or self.app.rebalancing:
                continue
            held = self._gate.held if self._gate is not None else {}
            for tp in self.assignment() - self._paused_partitions:
                want = self._expected.expected(tp)
                if want is None or tp in held:  # kept back by the gate: not lost
                    continue
                try:
                    position = await asyncio.wait_for(self._thread.position(tp), 5.0)
                except Exception:  # noqa: BLE001 - a revoke or broker trouble: next time
                    continue
                if self._handing is not None:  # checked after the await, right before seeking
                    self._expected.busy()
                    break
                if position is not None and self._expected.stalled(tp, position):
                    self._seek_back(tp, want, f"the client is at offset {position} but "
                                          "nothing was handed over for "
                                          f"{2 * STALL_CHECK_SECONDS:g} s")

    def refetch(self, first: Mapping[Any, int], why: str) -> None:
        """Fetch each assigned partition again from `first[tp]` (records thrown away after
        they were handed over)."""
        for tp, offset in first.items():
            self._seek_back(ensure_TP(tp), offset, why)

    def _seek_back(self, tp: TP, offset: int | None, why: str) -> None:
        """Fetch `tp` again from `offset`: the records from there were not handed over
        (synchronous, as the client's seek is)."""
        if offset is None:
            return
        try:
            assigned = tp in self.assignment()
        except Exception:  # noqa: BLE001 - not started or stopping: nothing to fetch again
            return
        if not assigned:
            return  # revoked meanwhile: its next owner starts from the committed offset
        logger.info("fetching %s[%d] again from offset %d: %s", tp.topic, tp.partition, offset,
                    why)
        try:
            self._thread.seek(tp, offset)
        except Exception as exc:  # noqa: BLE001 - a revoke can race the seek; the rebalance re-seeks
            logger.warning("could not seek %s[%d] back to %d: %r", tp.topic, tp.partition,
                           offset, exc)
            return
        self._read_offset[tp] = offset if offset else None  # as Faust's seek
        self._expected.sought(tp, offset)
        CONSUMER_SEEKS.inc()


class PufferfishTransport(AIOKafkaTransport):
    Consumer = PufferfishConsumer
