"""The throughput baseline: a raw aiokafka consume->produce loop (no consumer group,
partitions assigned, one ``send`` per record to an output topic, acks=all like Faust) over a
pipeline's input topics from the beginning."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.harness import PARTITIONS
from stream_app.kafka.clients import ISOLATION_LEVEL


async def raw_loop(
    bootstrap: str, topics: Sequence[str], partitions: int, total: int, out_topic: str,
    timeout: float = 120.0,
) -> tuple[int, float]:
    """Consume ``total`` records of ``topics`` from the start, send one record each.

    Returns (records, seconds from the first fetched batch to the last send acknowledged).
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level=ISOLATION_LEVEL)  # as the worker's consumer
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await consumer.start()
    await producer.start()
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        n, start, pending = 0, None, []
        deadline = time.monotonic() + timeout
        while n < total:
            if time.monotonic() > deadline:
                raise RuntimeError(f"raw loop: {n} of {total} records in {timeout:g} s")
            batch = await consumer.getmany(timeout_ms=500)
            if not batch:
                continue
            if start is None:
                start = time.perf_counter()
            for records in batch.values():
                for rec in records:
                    pending.append(await producer.send(out_topic, rec.value, key=rec.key))
                    n += 1
            if len(pending) > 2000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        assert start is not None
        return n, time.perf_counter() - start
    finally:
        await consumer.stop()
        await producer.stop()


def raw_pass(
    bootstrap: str, topics: dict[str, str], total: int, out_topic: str
) -> tuple[int, float]:
    """One pass of the raw loop over both input topics of ``topics`` (PARTITIONS each)."""
    return asyncio.run(raw_loop(bootstrap, [topics["reports"], topics["membership"]],
                                PARTITIONS, total, out_topic))
