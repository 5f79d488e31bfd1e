"""The embedded tansu broker: lifecycle, a real produce/consume round trip, topic creation."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer

from stream_app.demo import broker as broker_py
from stream_app.demo.broker import EmbeddedBroker, free_port, listens_on, tansu_binary
from stream_app.demo.broker_admin import BrokerError, create_topics, wait_ready
from tests.kafka_helpers import consume_all, json_values, produce_json
from tests.processes import pid_alive

pytestmark = pytest.mark.integration


def _can_bind(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_tansu_binary_is_executable() -> None:
    path = tansu_binary()
    assert path.name == "tansu" and path.parent.name == "bin"
    assert os.access(path, os.X_OK)


def test_free_port_is_bindable_on_loopback() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    assert _can_bind(port)


def test_start_stop_kills_process_and_frees_port(tmp_path: Path) -> None:
    log = tmp_path / "tansu.log"
    broker = EmbeddedBroker(log_path=log)
    t0 = time.monotonic()
    broker.start(timeout=30)
    started_in = time.monotonic() - t0
    pid, port = broker.pid, broker.port
    assert pid is not None and pid_alive(pid)
    assert broker.bootstrap == f"127.0.0.1:{port}"
    assert broker.url == f"kafka://127.0.0.1:{port}"
    assert not _can_bind(port), "broker should hold its port"
    assert started_in < 10, f"start took {started_in:.2f} s"

    broker.stop()
    assert not broker.running and broker.pid is None
    assert not pid_alive(pid), "tansu process still exists after stop()"
    assert _can_bind(port), "port still taken after stop()"
    assert "listening on: tcp://127.0.0.1:" in log.read_text()
    broker.stop()  # idempotent

    # The same fixed port is usable again by a new broker.
    with EmbeddedBroker(port=port) as again:
        assert again.port == port and again.running


async def test_wait_ready_times_out_without_broker(closed_port: int) -> None:
    t0 = time.monotonic()
    with pytest.raises(BrokerError, match="not ready"):
        await wait_ready(f"127.0.0.1:{closed_port}", timeout=1.0)
    assert time.monotonic() - t0 < 5


def test_fixed_port_in_use_is_a_clear_error(broker: EmbeddedBroker) -> None:
    other = EmbeddedBroker(port=broker.port)
    with pytest.raises(BrokerError, match="already in use"):
        other.start(timeout=5)
    assert not other.running
    assert broker.running


def test_a_port_taken_before_tansu_binds_it_is_left_for_another(
        broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The race free_port() leaves: the port was free when chosen, another broker took it
    before tansu bound it. That broker answers there too, and a tansu slow to start (a loaded
    machine: here it waits half a second) is not yet gone: the new broker is still not taken
    for started on that port, but starts on another."""
    slow = tmp_path / "slow-tansu"
    slow.write_text(f"#!/bin/sh\nsleep 0.5\nexec {tansu_binary()} \"$@\"\n")
    slow.chmod(0o755)
    monkeypatch.setattr(broker_py, "tansu_binary", lambda: slow)
    monkeypatch.setattr(broker_py, "port_free", lambda port: True)  # the check came too early
    chosen = iter([broker.port])
    monkeypatch.setattr(broker_py, "free_port", lambda: next(chosen, free_port()))
    with EmbeddedBroker() as other:
        assert other.port != broker.port
        assert other.pid is not None and listens_on(other.pid, other.port)
    assert broker.running and broker.pid is not None and listens_on(broker.pid, broker.port)


def test_a_started_broker_starts_again_on_its_port(tmp_path: Path) -> None:
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as broker:
        port = broker.port
        broker.stop()
        broker.start()  # where its clients look for it: a fixed port now
        assert broker.port == port and broker.pid is not None and listens_on(broker.pid, port)


def test_context_manager_stops_on_error() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with EmbeddedBroker() as b:
            pid = b.pid
            raise RuntimeError("boom")
    assert pid is not None and not pid_alive(pid)


async def test_produce_consume_round_trip(broker: EmbeddedBroker) -> None:
    await create_topics(broker.bootstrap, {"roundtrip": 4})
    sent = [(f"user-{i % 7}", {"user_id": f"user-{i % 7}", "n": i}) for i in range(200)]
    assert await produce_json(broker.bootstrap, "roundtrip", sent) == 200

    records = await consume_all(broker.bootstrap, "roundtrip", timeout=60, min_count=200)
    values = json_values(records)
    assert sorted(v["n"] for v in values) == list(range(200))
    # Same key → same partition; 7 keys over 4 partitions use more than one partition.
    partition_of: dict[bytes, set[int]] = {}
    for r in records:
        assert r.key is not None
        partition_of.setdefault(r.key, set()).add(r.partition)
    assert all(len(p) == 1 for p in partition_of.values())
    assert len({r.partition for r in records}) > 1


async def test_create_topics_four_partitions(broker_module: EmbeddedBroker) -> None:
    bootstrap = broker_module.bootstrap
    await create_topics(bootstrap, {"reports-4": 4, "partials-1": 1})
    await create_topics(bootstrap, {"reports-4": 4})  # idempotent

    # Checked through a consumer's metadata, not through the function under test.
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        assert {"reports-4", "partials-1"} <= await consumer.topics()  # refreshes metadata
        assert consumer.partitions_for_topic("reports-4") == {0, 1, 2, 3}
        assert consumer.partitions_for_topic("partials-1") == {0}
    finally:
        await consumer.stop()


async def test_create_topics_partition_mismatch(broker_module: EmbeddedBroker) -> None:
    bootstrap = broker_module.bootstrap
    await create_topics(bootstrap, {"mismatch": 4})
    with pytest.raises(BrokerError, match="'mismatch' has 4 partitions, expected 2"):
        await create_topics(bootstrap, {"mismatch": 2})


async def test_create_topics_rejects_bad_partition_count(broker_module: EmbeddedBroker) -> None:
    with pytest.raises(BrokerError, match="partitions >= 1"):
        await create_topics(broker_module.bootstrap, {"zero": 0})
