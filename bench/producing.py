"""Handing the benchmarks' records to a confluent-kafka (librdkafka) producer.

``produce`` only queues a record locally; while that queue is full it raises BufferError, and
serving the producer's delivery reports (``poll``) makes room.
"""

from __future__ import annotations

from typing import Any


def produce_waiting(producer: Any, topic: str, key: str, value: bytes) -> None:
    """Queue one record (key as UTF-8), waiting while the producer's queue is full."""
    while True:
        try:
            producer.produce(topic, value, key=key.encode())
            return
        except BufferError:
            producer.poll(0.05)
