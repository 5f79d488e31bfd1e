"""The latency benchmark's markers (bench/latency.py describes the method): a marker user
reports strictly increasing values among background events offered at a set rate, and a
release includes marker j once its noisy sum reaches the marker's value less the noise bound.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.harness import DOMAIN
from bench.workload import Workload
from stream_app.kafka.clients import ISOLATION_LEVEL

MARKER = "marker-user"
MARKER_EVERY = 0.5
TAIL = 1e-9  # the Laplace bound is exceeded with this probability


def laplace_bound(theta: float) -> float:
    """|noise| exceeds this with probability < TAIL (Laplace(theta): P(|X| > t) = e^{-t/theta});
    one grid step more for the discrete grid."""
    return theta * math.log(1 / TAIL) + 2.0**-10


def marker_step(users: int) -> float:
    """The marker's value step S: a power of two above 4 (every background user at max + 1)."""
    return float(2 ** math.ceil(math.log2(4 * (max(DOMAIN) * users + 1))))


def separable(step: float, background_max: float, theta: float) -> bool:
    """v_{j-1} + background + noise stays below v_j - bound (so inclusion is exact)."""
    return background_max + 2 * laplace_bound(theta) < step


def offer(
    bootstrap: str, topics: dict[str, str], work: Workload, rate: float, seconds: float,
    markers: list[float],
) -> tuple[int, list[float]]:
    """Background events at ``rate``/s for ``seconds`` plus one marker every MARKER_EVERY s.

    Produced with librdkafka (confluent-kafka, partitioner murmur2_random: the key contract).
    The generator shares the two cores with the worker and the broker; at 6,000 ev/s it took
    ~26 us of CPU per event this way (most of it building and encoding the events) against
    ~60 us with aiokafka's Python send path (0.16 vs 0.37 of a core, measured 2026-11-27,
    load 2.3), and with aiokafka the worker fell behind a rate it drains easily in a backlog.
    A marker's time is read just before it is handed to the producer. Returns (background
    events sent, send time of each marker); raises if any event was not acknowledged.
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                         "partitioner": "murmur2_random",
                         "queue.buffering.max.messages": 2_000_000})
    failed: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    sent = 0
    marker_times: list[float] = []
    start = time.perf_counter()
    next_marker = start
    while (now := time.perf_counter()) - start < seconds:
        due = int(rate * (now - start)) - sent
        for t, k, v in work.backlog(due):
            producer.produce(topics[t], json.dumps(v).encode(), key=k.encode(),
                             on_delivery=delivered)
        sent += max(due, 0)
        if now >= next_marker and len(marker_times) < len(markers):
            value = markers[len(marker_times)]
            t_send = time.time()
            doc = {"user_id": MARKER, "value": value, "report_id": f"m{value:g}", "ts": t_send}
            producer.produce(topics["reports"], json.dumps(doc).encode(), key=MARKER.encode(),
                             on_delivery=delivered)
            marker_times.append(t_send)
            next_marker += MARKER_EVERY
        producer.poll(0)
        time.sleep(0.01)
    left = producer.flush(60)
    if left or failed:
        raise RuntimeError(f"{left} events unacknowledged, {len(failed)} failed: {failed[:3]}")
    return sent, marker_times


async def read_releases(bootstrap: str, topic: str, most: float = 1.0) -> list[dict[str, Any]]:
    """The releases so far: to the end offset of the moment, then until 1 s passes without a
    new one, or `most` seconds past that end (a releaser publishing every second on Kafka is
    never quiet for a second; tansu's end offset is its last batch's start, whose record the
    extra time brings)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level=ISOLATION_LEVEL)
    await consumer.start()
    out = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        quiet_since = time.monotonic()
        caught_at: float | None = None
        while time.monotonic() - quiet_since < 1.0:
            batch = await consumer.getmany(tp, timeout_ms=300)
            for rec in batch.get(tp, []):
                out.append(json.loads(rec.value))
                quiet_since = time.monotonic()
            if caught_at is None and await consumer.position(tp) >= end:
                caught_at = time.monotonic()
            if caught_at is not None and time.monotonic() - caught_at >= most:
                break
    finally:
        await consumer.stop()
    return out


def marker_latencies(
    releases: list[dict[str, Any]], values: list[float], sent: list[float], first: int
) -> list[float]:
    """Latency of markers first..first+len(sent)-1 (NaN if no release included one).

    A release includes marker j when its noisy_sum >= values[j] - laplace_bound(theta):
    ``values`` increase by more than the background's largest part plus twice the bound
    (``separable``), so no release before marker j gets there.
    """
    out = []
    for i, t_send in enumerate(sent):
        floor = values[first + i]
        hit = next((r["ts"] for r in releases if r["ts"] >= t_send
                    and r["noisy_sum"] >= floor - laplace_bound(r["theta"])), None)
        out.append(hit - t_send if hit is not None else float("nan"))
    return out
