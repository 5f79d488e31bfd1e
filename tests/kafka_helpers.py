"""Helpers for tests that talk to a real broker (see tests/conftest.py for the broker fixtures)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from stream_app.local.broker import topic_partitions


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
    bootstrap: str, topic: str, timeout: float = 60.0, quiet: float = 0.5
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of `topic`, read until each partition reaches the end offsets taken at the
    start AND nothing new arrived for `quiet` seconds (a time-only read can stop short under
    load). Raises TimeoutError instead of returning a partial read."""
    partitions = (await topic_partitions(bootstrap)).get(topic, 0)
    if not partitions:
        return []
    consumer, tps = await _from_the_start(bootstrap, topic, partitions)
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        last_data = time.monotonic()
        while True:
            batch = await consumer.getmany(timeout_ms=200)
            for part in batch.values():
                records.extend(part)
                last_data = time.monotonic()
            positions = [await consumer.position(tp) for tp in tps]
            caught_up = all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True))
            if caught_up and time.monotonic() - last_data >= quiet:
                return records
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: not read to its end in {timeout:g} s")
    finally:
        await consumer.stop()


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
