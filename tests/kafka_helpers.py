"""Helpers for tests that talk to a real broker (see tests/conftest.py for the broker fixtures)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from stream_app.demo.broker_admin import topic_partitions


async def _from_the_start(
    bootstrap: str, topic: str, partitions: int
) -> tuple[AIOKafkaConsumer, list[TopicPartition]]:
    """A started group-less consumer assigned to every partition, at the start of each."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    return consumer, tps


async def consume_all(
    bootstrap: str, topic: str, timeout: float, min_count: int | None = None
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of `topic` from the start of each partition, read without a consumer group.

    Stops after `timeout` seconds, or earlier once `min_count` records were read. Waits (within
    `timeout`) for the topic to exist instead of auto-creating it.
    """
    deadline = time.monotonic() + timeout
    partitions = 0
    while not partitions:
        partitions = (await topic_partitions(bootstrap)).get(topic, 0)
        if not partitions:
            if time.monotonic() > deadline:
                return []
            await asyncio.sleep(0.1)
    consumer, tps = await _from_the_start(bootstrap, topic, partitions)
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        while min_count is None or len(records) < min_count:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            batch = await consumer.getmany(timeout_ms=int(min(left, 0.5) * 1000))
            for part in batch.values():
                records.extend(part)
    finally:
        await consumer.stop()
    return records


async def read_to_end(
    bootstrap: str, topic: str, timeout: float = 60.0, quiet: float = 0.5,
    most: float | None = None,
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of `topic`, read until each partition reaches the end offsets taken at the
    start AND nothing new arrived for `quiet` seconds (a time-only read can stop short under
    load). Raises TimeoutError instead of returning a partial read.

    The quiet period also picks up the last batch of each partition on tansu, whose end
    offsets are the start of the last batch, not the log end (../shared/kafka.md). `most`:
    return at most this long after reaching the end offsets even while records keep coming
    (a lower bound on a writer's progress, in bounded time)."""
    partitions = (await topic_partitions(bootstrap)).get(topic, 0)
    if not partitions:
        return []
    consumer, tps = await _from_the_start(bootstrap, topic, partitions)
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        last_data = time.monotonic()
        caught_at: float | None = None
        while True:
            batch = await consumer.getmany(timeout_ms=200)
            for part in batch.values():
                records.extend(part)
                last_data = time.monotonic()
            positions = [await consumer.position(tp) for tp in tps]
            now = time.monotonic()
            if caught_at is None and all(
                    pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                caught_at = now
            if caught_at is not None and (
                    now - last_data >= quiet or (most is not None and now - caught_at >= most)):
                return records
            if now > deadline:
                raise TimeoutError(f"{topic}: not read to its end in {timeout:g} s")
    finally:
        await consumer.stop()


async def delete_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> None:
    """Delete `topic` and return once the broker no longer lists it."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()
    deadline = time.monotonic() + timeout
    while topic in await topic_partitions(bootstrap):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {topic} deleted")
        await asyncio.sleep(0.1)


def json_values(records: Iterable[ConsumerRecord[bytes, bytes]]) -> list[Any]:
    return [json.loads(r.value) for r in records if r.value is not None]


async def produce_json(
    bootstrap: str, topic: str, messages: Iterable[tuple[str | None, Mapping[str, Any]]]
) -> int:
    """Send (key, JSON value) pairs and wait until the broker acknowledged all of them."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    sent = 0
    try:
        futures = []
        for key, value in messages:
            futures.append(await producer.send(
                topic, json.dumps(value).encode(), key=key.encode() if key is not None else None
            ))
            sent += 1
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return sent


Record = tuple[str, bytes | None, bytes]  # topic, key, value


class ProducerThread:
    """An aiokafka producer run by ``produce`` on a background thread of its own (a test's
    stream beside the workers); ``join`` waits for it and re-raises its error."""

    name = "producer"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)

    async def produce(self, producer: AIOKafkaProducer) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def join(self, what: str, reraise: bool = True) -> None:
        self._thread.join(timeout=120)
        assert not self._thread.is_alive(), f"timed out after 120 s waiting for the {what}"
        if self._error is not None and reraise:
            raise self._error

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            self._error = exc

    async def _run(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await producer.start()
        try:
            await self.produce(producer)
        finally:
            await producer.stop()


class PacedProducer(ProducerThread):
    """Produce `chunks` of records from a background thread, one chunk every `pace` seconds,
    holding the last `hold` chunks back until `release()`.

    This is how a test acts "mid-stream" whatever the worker's speed: input keeps arriving
    while the test waits for its trigger and kills a worker, and the held-back chunks are
    certain to be unsent at that moment. Use it as a context manager: leaving the block
    releases the rest, waits for every ack, and re-raises a producer error.
    """

    name = "paced-producer"

    def __init__(self, bootstrap: str, chunks: list[list[Record]], hold: int,
                 pace: float = 0.1) -> None:
        assert 0 < hold < len(chunks), "hold back some chunks, but not all"
        super().__init__(bootstrap)
        self.chunks, self.hold, self.pace = chunks, hold, pace
        self.sent = 0
        self.sent_at_release: int | None = None
        self._released = threading.Event()
        self._abort = threading.Event()

    @property
    def total(self) -> int:
        return sum(len(c) for c in self.chunks)

    def __enter__(self) -> PacedProducer:
        self.start()
        return self

    def release(self) -> None:
        """Let the held-back chunks go (e.g. right after the kill)."""
        if not self._released.is_set():
            self.sent_at_release = self.sent
            self._released.set()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self._abort.set()
        self.release()
        self.join("producer", reraise=exc_type is None)

    async def produce(self, producer: AIOKafkaProducer) -> None:
        for i, chunk in enumerate(self.chunks):
            if i >= len(self.chunks) - self.hold:
                while not self._released.is_set():
                    await asyncio.sleep(0.02)
            elif i:
                await asyncio.sleep(self.pace)  # the pace of the stream, not a guess
            if self._abort.is_set():
                return
            futures = [await producer.send(t, v, key=k) for t, k, v in chunk]
            await asyncio.gather(*futures)
            self.sent += len(chunk)


class SteadyStream(ProducerThread):
    """Produce `records_for(0)`, `records_for(1)`, ... from a background thread, `per_tick` of
    them every `pace` seconds, until `stop()`: a stream that lasts as long as the scenario
    (kills, takeovers, restarts) whatever its speed. `done` counts the items whose records the
    broker acknowledged, in order; an item is sent whole or not at all. Leaving the block stops
    the stream, waits for the last acknowledgements, and re-raises a producer error."""

    name = "steady-stream"

    def __init__(self, bootstrap: str, records_for: Callable[[int], list[Record]],
                 per_tick: int, pace: float = 0.1) -> None:
        super().__init__(bootstrap)
        self.records_for, self.per_tick, self.pace = records_for, per_tick, pace
        self.done = 0
        self._stop = threading.Event()

    def __enter__(self) -> SteadyStream:
        self.start()
        return self

    def stop(self) -> int:
        """Stop after the tick in progress; returns how many items were sent."""
        self._stop.set()
        self.join("stream", reraise=False)
        return self.done

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.stop()
        self.join("stream", reraise=exc_type is None)

    async def produce(self, producer: AIOKafkaProducer) -> None:
        while not self._stop.is_set():
            items = range(self.done, self.done + self.per_tick)
            futures = [await producer.send(t, v, key=k)
                       for i in items for t, k, v in self.records_for(i)]
            await asyncio.gather(*futures)
            self.done += self.per_tick
            await asyncio.sleep(self.pace)  # the pace of the stream, not a guess
