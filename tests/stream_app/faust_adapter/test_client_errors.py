"""The Kafka client's retried errors reach pufferfish_broker_errors_total (client_errors.py):
a real aiokafka client pointed at a port where nothing listens, and a real broker that stops
under a running consumer."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError
from prometheus_client import CollectorRegistry, Counter

from stream_app.demo.broker import EmbeddedBroker
from stream_app.faust_adapter.client_errors import CLIENT_LOGGER, count_client_errors


@pytest.fixture
def errors() -> Iterator[Counter]:
    counter = Counter("broker_errors", "test", registry=CollectorRegistry())
    handler = count_client_errors(counter)
    yield counter
    logging.getLogger(CLIENT_LOGGER).removeHandler(handler)


def _count(counter: Counter) -> float:
    """The counter's value as a scrape reads it (its ``_total`` sample)."""
    return next(s.value for metric in counter.collect() for s in metric.samples
                if s.name.endswith("_total"))


async def test_a_refused_connection_is_counted(errors: Counter, closed_port: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{closed_port}")
    with pytest.raises(KafkaConnectionError):
        await producer.start()
    await producer.stop()
    assert _count(errors) >= 1  # aiokafka.client: 'Unable connect to "127.0.0.1:<port>"'


async def test_at_the_strictest_log_level_too(errors: Counter, closed_port: int) -> None:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # log_level "error", the strictest the settings accept
    try:
        consumer = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{closed_port}")
        with pytest.raises(KafkaConnectionError):
            await consumer.start()
        await consumer.stop()
    finally:
        root.setLevel(level)
    assert _count(errors) >= 1


def test_only_the_clients_errors_are_counted(errors: Counter) -> None:
    logging.getLogger("aiokafka.consumer.fetcher").warning("a warning is not an error")
    logging.getLogger("faust.transport").error("not the Kafka client's")
    logging.getLogger("aiokafka2").error("not a child of the client's logger")
    assert _count(errors) == 0
    logging.getLogger("aiokafka.consumer.fetcher").error("Failed fetch messages from %s", 0)
    assert _count(errors) == 1


def test_a_second_count_replaces_the_first(errors: Counter) -> None:
    again = Counter("broker_errors_again", "test", registry=CollectorRegistry())
    handler = count_client_errors(again)
    try:
        logging.getLogger("aiokafka.client").error("Unable connect to node with id %s", 0)
    finally:
        logging.getLogger(CLIENT_LOGGER).removeHandler(handler)
    assert (_count(errors), _count(again)) == (0, 1)


@pytest.mark.timeout(120)
async def test_a_broker_stopping_under_a_consumer_is_counted_at_once(
        errors: Counter, tmp_path: Path) -> None:
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    topic = TopicPartition("client-errors", 0)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=100)
    try:
        await producer.start()
        await producer.send_and_wait(topic.topic, b"x", partition=0)
        await producer.stop()
        await consumer.start()
        consumer.assign([topic])
        consumer.seek(topic, 0)
        assert await consumer.getmany(timeout_ms=5000)
        before = _count(errors)
        broker.stop()
        deadline = time.monotonic() + 5.0
        while _count(errors) == before and time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=200)  # the fetcher retries; nothing is raised
        assert _count(errors) > before, "no client error counted 5 s after the broker stopped"
        broker.start()  # on the same port: the consumer stops cleanly
    finally:
        await asyncio.wait_for(consumer.stop(), 30)
        broker.stop()
