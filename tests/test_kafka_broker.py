"""Apache Kafka 2.3.0 as a test broker (tests/kafka_broker.py): a produce/consume round trip on
the port it advertises, transactions (an aborted one invisible to read_committed, there for
read_uncommitted), and stop/start by PID with the log kept."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import Producer

from stream_app.demo.broker import HOST
from stream_app.demo.broker_admin import create_topics
from tests.kafka_broker import KafkaBroker
from tests.kafka_helpers import consume_all, json_values, produce_json
from tests.reliability.procnet import listening

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("kafka")]


def _name(role: str) -> str:
    return f"kb-{role}-{uuid.uuid4().hex[:8]}"


async def _cluster(bootstrap: str) -> list[tuple[str, int]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_cluster()
    finally:
        await admin.close()
    return [(b["host"], b["port"]) for b in described["brokers"]]


def test_round_trip_on_the_ports_read_back(kafka_broker: KafkaBroker) -> None:
    topic = _name("round-trip")
    asyncio.run(create_topics(kafka_broker.bootstrap, {topic: 2}))
    sent = [(f"k{i}", {"i": i}) for i in range(20)]
    assert asyncio.run(produce_json(kafka_broker.bootstrap, topic, sent)) == 20
    got = json_values(asyncio.run(consume_all(kafka_broker.bootstrap, topic, 30, min_count=20)))
    assert sorted(v["i"] for v in got) == list(range(20))
    # Kafka registered the port it bound (listeners=...:0), not 0: clients are sent back to it
    assert asyncio.run(_cluster(kafka_broker.bootstrap)) == [(HOST, kafka_broker.port)]
    pids = kafka_broker.pids
    assert pids["kafka"] is not None and pids["zookeeper"] is not None
    assert listening([pids["kafka"]]) == [(HOST, kafka_broker.port)]
    assert listening([pids["zookeeper"]]) == [(HOST, kafka_broker.zookeeper_port)]


def _transactions(bootstrap: str, topic: str) -> None:
    """Committed a0-a2, aborted b0-b2, committed c0-c2, on partition 0 of `topic`."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": _name("tx")})
    producer.init_transactions(60)
    for prefix, commit in (("a", True), ("b", False), ("c", True)):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=f"{prefix}{i}".encode(), partition=0)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.flush(60)  # the aborted records are in the log before the abort marker
            producer.abort_transaction(60)


async def _read(bootstrap: str, topic: str, isolation_level: str) -> list[tuple[int, str]]:
    """(offset, value) of every record of partition 0 up to its end offset (for read_committed,
    the last stable offset: every transaction here is finished)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, isolation_level=isolation_level)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[tuple[int, str]] = []
        while await consumer.position(tp) < end:
            for record in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                out.append((record.offset, record.value.decode()))
        return out
    finally:
        await consumer.stop()


def test_an_aborted_transaction_is_invisible_to_read_committed(
    kafka_broker: KafkaBroker,
) -> None:
    topic = _name("transactions")
    asyncio.run(create_topics(kafka_broker.bootstrap, {topic: 1}))
    _transactions(kafka_broker.bootstrap, topic)
    committed = asyncio.run(asyncio.wait_for(
        _read(kafka_broker.bootstrap, topic, "read_committed"), 60))
    uncommitted = asyncio.run(asyncio.wait_for(
        _read(kafka_broker.bootstrap, topic, "read_uncommitted"), 60))
    # each transaction's marker takes an offset: 3 (a's commit) and 7 (b's abort)
    assert committed == [(0, "a0"), (1, "a1"), (2, "a2"), (8, "c0"), (9, "c1"), (10, "c2")]
    assert uncommitted == [(0, "a0"), (1, "a1"), (2, "a2"), (4, "b0"), (5, "b1"), (6, "b2"),
                           (8, "c0"), (9, "c1"), (10, "c2")]


def _group_gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_stop_ends_both_process_groups_and_start_brings_the_log_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    mark = uuid.uuid4().hex
    monkeypatch.setenv("PUFFERFISH_KAFKA_TEST_MARK", mark)  # as .ci/run's PUFFERFISH_CI_RUN
    broker = KafkaBroker(tmp_path / "kafka")
    try:
        broker.start()
        bootstrap, zookeeper_port = broker.bootstrap, broker.zookeeper_port
        pids = [pid for pid in broker.pids.values() if pid is not None]
        assert len(pids) == 2
        for pid in pids:
            assert os.getpgid(pid) == pid  # its own process group ...
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"PUFFERFISH_KAFKA_TEST_MARK={mark}".encode() in environ  # ... our env
        topic = _name("kept")
        asyncio.run(create_topics(bootstrap, {topic: 1}))
        asyncio.run(produce_json(bootstrap, topic, [(None, {"i": i}) for i in range(5)]))

        broker.stop()
        assert all(_group_gone(pid) for pid in pids)
        assert not broker.running

        broker.start()
        assert (broker.bootstrap, broker.zookeeper_port) == (bootstrap, zookeeper_port)
        got = json_values(asyncio.run(consume_all(bootstrap, topic, 60, min_count=5)))
        assert [v["i"] for v in got] == list(range(5))
    finally:
        broker.stop()
