"""Reading a 1-partition journal topic (``releases``, ``priors``) with every broker call bounded.

A consumer pinned to partition 0 serves full reads (restore) and the fence drain (records
published since the last read). It reads every record in the log, those of aborted transactions
included: a reader of ``releases`` may choose read_uncommitted, so whatever reached the log
counts as published (spent budget, seqs, ticks, node draws; docs/design.md, "Fences").
Broker trouble: each call is time-limited; a consumer that saw an error is dropped and
recreated on the next use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from typing import Generic, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import BaseModel, ValidationError

from pufferfish_core.errors import PufferfishError
from stream_app.kafka.aio import within
from stream_app.kafka.clients import journal_consumer_kwargs
from stream_app.settings import Settings

log = logging.getLogger(__name__)

JOURNAL_READ_LIMIT_SECONDS = 30.0  # whole read, however long the journal
JOURNAL_STALL_SECONDS = 5.0  # behind the end and no new record for this long: give up
BROKER_CALL_SECONDS = 10.0  # any single broker call (start, end_offsets, position, stop)
FENCE_DRAIN_MS = 100
# The consumer's background fetch of a quiet journal waits this long for data; a ListOffsets
# request (the fence's end offset) queues behind it on the connection. At the client's 500 ms
# default a quiet priors journal added 0.5 s to every tick.
JOURNAL_FETCH_WAIT_MS = 20

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class JournalError(PufferfishError, RuntimeError):
    """A journal could not be read to its end (or a broker call did not answer) in time."""


async def bounded(aw: Awaitable[T], what: str, seconds: float = BROKER_CALL_SECONDS) -> T:
    """Await with a time bound that holds even if the call ignores cancellation
    (stream_app/kafka/aio.py)."""
    task = await within(aw, seconds)
    if task is None:
        raise JournalError(f"{what}: no answer in {seconds:g} s")
    if task.cancelled():
        # aiokafka cancels its own futures when a connection dies; escaping as CancelledError,
        # that would end the Faust timer task for good (the release stall after a broker restart)
        raise JournalError(f"{what}: cancelled inside the Kafka client")
    return task.result()


async def quietly(aw: Awaitable[object], what: str) -> None:
    """Stop a client that is being dropped: bounded, errors ignored."""
    try:
        await bounded(aw, what)
    except Exception:  # noqa: BLE001 - it is being dropped anyway
        pass


class Journal(Generic[M]):
    """A consumer pinned to partition 0 of ``topic``, parsing records as ``model``."""

    def __init__(self, settings: Settings, topic: str, model: type[M]) -> None:
        self.settings = settings
        self.tp = TopicPartition(topic, 0)
        self.model = model
        self._consumer: AIOKafkaConsumer | None = None

    def _parse(self, value: bytes | None, offset: int) -> M | None:
        try:
            return self.model.model_validate_json(value or b"")
        except ValidationError:
            log.warning("journal %s: skipping an unparseable record at offset %d",
                        self.tp.topic, offset)
            return None

    async def _get(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                **journal_consumer_kwargs(self.settings), group_id=None, enable_auto_commit=False,
                auto_offset_reset="earliest", fetch_max_wait_ms=JOURNAL_FETCH_WAIT_MS,
            )
            try:
                await bounded(consumer.start(), "journal consumer start")
                consumer.assign([self.tp])
            except BaseException:
                await quietly(consumer.stop(), "journal consumer stop")
                raise
            self._consumer = consumer
        return self._consumer

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await quietly(consumer.stop(), "journal consumer stop")

    async def read_all(self) -> list[M]:
        """Every parseable record from the start, leaving the position at the end (bounded)."""
        s = self.settings
        try:
            consumer = await self._get()
            tp = self.tp
            if not await bounded(consumer.seek_to_beginning(tp), "journal seek"):
                raise JournalError(f"{tp.topic}: the seek to the beginning did not finish")
            # tansu reports the start of the last batch as the end: also wait for quiet.
            end = (await bounded(consumer.end_offsets([tp]), "journal end offset"))[tp]
            out: list[M] = []
            started = last_data = time.monotonic()
            while True:
                batch = await bounded(consumer.getmany(tp, timeout_ms=200), "journal fetch")
                for rec in batch.get(tp, []):
                    last_data = time.monotonic()
                    parsed = self._parse(rec.value, rec.offset)
                    if parsed is not None:
                        out.append(parsed)
                position = await bounded(consumer.position(tp), "journal position")
                now = time.monotonic()
                if position >= end and now - last_data >= s.journal_quiet_seconds:
                    return out
                if position < end and now - last_data > JOURNAL_STALL_SECONDS:
                    raise JournalError(f"{tp.topic} stalled at offset {position} < {end}")
                if now - started > JOURNAL_READ_LIMIT_SECONDS:
                    raise JournalError(
                        f"{tp.topic} not read to its end in {JOURNAL_READ_LIMIT_SECONDS:g} s")
        except BaseException:
            await self.close()
            raise

    async def drain(self) -> list[M]:
        """Records published since the last read, up to the log end the broker reports now.

        Enough to see any other publisher: tansu's ListOffsets may answer the start of the last
        batch + 1 instead of the log end (shared broker notes), but even then the first record
        of every batch, and so of every foreign publication, lies below the reported end.
        """
        try:
            consumer = await self._get()
            tp = self.tp
            end = (await bounded(consumer.end_offsets([tp]), "journal end offset"))[tp]
            out: list[M] = []
            started = time.monotonic()
            while True:
                position = await bounded(consumer.position(tp), "journal position")
                if position >= end:
                    return out
                batch = await bounded(consumer.getmany(tp, timeout_ms=FENCE_DRAIN_MS),
                                      "journal fetch")
                recs = batch.get(tp, [])
                out.extend(r for r in (self._parse(x.value, x.offset) for x in recs)
                           if r is not None)
                if time.monotonic() - started > JOURNAL_STALL_SECONDS:
                    raise JournalError(f"{tp.topic} stalled at offset {position} < {end}")
        except BaseException:
            await self.close()
            raise


async def read_journal(settings: Settings, topic: str, model: type[M]) -> list[M]:
    """Every parseable record of a journal topic, in log order (bounded in time)."""
    journal = Journal(settings, topic, model)
    try:
        return await journal.read_all()
    finally:
        await journal.close()
