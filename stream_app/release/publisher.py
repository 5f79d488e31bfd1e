"""The release agent's producer: acks=all, every call bounded, dropped and rebuilt after errors."""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaProducer

from stream_app.kafka.clients import aiokafka_kwargs
from stream_app.metrics import Metrics
from stream_app.release.journal import bounded, quietly
from stream_app.settings import Settings

log = logging.getLogger(__name__)

SEND_TIMEOUT_MS = 15000


class Publisher:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._producer: AIOKafkaProducer | None = None

    async def ready(self) -> None:
        """Start the producer if needed (raises while the broker is unreachable)."""
        if self._producer is None:
            producer = AIOKafkaProducer(
                **aiokafka_kwargs(self.settings), acks="all", linger_ms=0,
                request_timeout_ms=SEND_TIMEOUT_MS,
            )
            try:
                await bounded(producer.start(), "release producer start")
            except BaseException:
                await quietly(producer.stop(), "release producer stop")
                raise
            self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await quietly(producer.stop(), "release producer stop")

    async def send(self, topic: str, payload: bytes) -> bool:
        """Send to partition 0 and wait for the ack; False (counted, logged) on any failure."""
        try:
            await self.ready()
            assert self._producer is not None
            # aiokafka can keep retrying a batch whose connection died: bound the wait too
            await bounded(self._producer.send_and_wait(topic, payload, partition=0),
                          f"{topic} send", SEND_TIMEOUT_MS / 1000 + 10.0)
        except Exception as exc:  # noqa: BLE001 - broker trouble must not kill the worker
            self.metrics.broker_errors.inc()
            await self.stop()
            log.error("%s record not acknowledged (%s); its seq is skipped", topic,
                      type(exc).__name__)
            return False
        return True
