"""A join acknowledged before its user's reports is applied first, whatever the backlog (issue
34; docs/design.md, "Per-user order across the input topics", the gate).

Two input topics. 50 joins are produced and acknowledged, then 600 reports per user as fast as
confluent-kafka goes — far past the hold's per-user bound (64): a worker that handed the reports
backlog over before the membership partition's joins dead-lettered 26,800 of 30,000 reports
`not_present` before the gate. Every report must be counted once, no dead letter, and each
user's histogram must equal the truth: for a fresh worker, a restarted one, and a rebalance in
the middle of the backlog (a second worker joining). 30,000 reports on noida-db (not the
rebalance, see its test) and on tansu.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from stream_app.demo.broker import EmbeddedBroker
from tests.noida_broker import NoidaBroker
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    Topics,
    Worker,
    membership,
    new_topics,
    read_json,
    users_changelog,
    wait_consumed,
    wait_counted,
    wait_ready,
    worker_env,
)
from tests.reliability.workload import Workload, histogram_mismatches

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

N_USERS = 50
PER_USER = {"noida": 600, "tansu": 600}  # 30,000 reports each
PARTITIONS = 4


@contextmanager
def running_broker(kind: str, tmp_path: Path) -> Iterator[Any]:
    if kind == "noida":
        broker = NoidaBroker(tmp_path / "noida", tmp_path / "noida.log").start()
        try:
            yield broker
        finally:
            broker.stop()
    else:
        with EmbeddedBroker(log_path=tmp_path / "tansu.log") as tansu:
            yield tansu


def produce_backlog(bootstrap: str, topics: Topics, wl: Workload) -> None:
    """The joins, acknowledged, then every report (murmur2 partitions, large batches)."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                         "linger.ms": 20, "batch.num.messages": 10_000})
    for user in wl.users:
        producer.produce(topics.membership, membership(user, "join"), key=user.encode())
    assert producer.flush(30) == 0
    for topic, key, value in wl.encode(topics, wl.reports):
        while True:
            try:
                producer.produce(topic, value, key=key)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def start(env: dict[str, str], tmp_path: Path, name: str) -> Worker:
    worker = Worker(env, tmp_path, name).start()
    wait_ready(worker)
    return worker


def check_all_counted(bootstrap: str, topics: Topics, wl: Workload,
                      workers: list[Worker]) -> None:
    wait_counted(bootstrap, topics, len(wl.reports), workers[-1], 240, to_end=True)
    states = users_changelog(bootstrap, topics.app_id)
    letters = read_json(bootstrap, topics.deadletter, timeout=1.0)
    assert letters == [], f"{len(letters)} dead letters, first {letters[:1]}"
    assert histogram_mismatches(wl, states) == {}


@pytest.mark.parametrize("kind", ["noida", "tansu"])
def test_a_fresh_worker_applies_the_joins_before_a_reports_backlog(tmp_path: Path,
                                                                   kind: str) -> None:
    wl = Workload.make(N_USERS, PER_USER[kind], dup_every=0, seed=34, prefix="fresh")
    with running_broker(kind, tmp_path) as broker:
        topics = new_topics(broker.bootstrap, PARTITIONS)
        produce_backlog(broker.bootstrap, topics, wl)
        worker = start(worker_env(broker.url, topics, tmp_path / "data", EXACT_SUM_SETTINGS),
                       tmp_path, "fresh")
        try:
            check_all_counted(broker.bootstrap, topics, wl, [worker])
            assert worker.metric("pufferfish_events_applied_total",
                                 {"kind": "report"}) == len(wl.reports)
        finally:
            worker.stop()


@pytest.mark.parametrize("kind", ["noida", "tansu"])
def test_a_restarted_worker_applies_the_joins_before_a_reports_backlog(tmp_path: Path,
                                                                       kind: str) -> None:
    """The worker ran (its offsets committed past a first user's join), stopped; the backlog
    is produced while it is down."""
    wl = Workload.make(N_USERS, PER_USER[kind], dup_every=0, seed=35, prefix="again")
    with running_broker(kind, tmp_path) as broker:
        topics = new_topics(broker.bootstrap, PARTITIONS)
        env = worker_env(broker.url, topics, tmp_path / "data", EXACT_SUM_SETTINGS)
        first = start(env, tmp_path, "first")
        try:
            producer = Producer({"bootstrap.servers": broker.bootstrap,
                                 "partitioner": "murmur2_random"})
            producer.produce(topics.membership, membership("early", "join"), key=b"early")
            assert producer.flush(30) == 0
            wait_consumed(first, "membership", 1)
        finally:
            assert first.stop() == 0
        produce_backlog(broker.bootstrap, topics, wl)
        worker = start(env, tmp_path, "restarted")
        try:
            check_all_counted(broker.bootstrap, topics, wl, [worker])
        finally:
            worker.stop()


@pytest.mark.parametrize("kind", ["tansu"])
def test_a_rebalance_mid_backlog_keeps_every_join_before_its_reports(tmp_path: Path,
                                                                     kind: str) -> None:
    """A second worker joins while the first is draining the backlog: the partitions it takes
    over are read from their committed offsets, joins and reports alike. The first worker
    drains the backlog faster than the second starts, so it is paused (SIGSTOP, as a long GC
    pause would) once 5 % are counted (in batches of 100, so that the count is seen early),
    and resumed once the second is up and joining: the rebalance then lands mid-backlog (the
    second worker must count some reports).

    tansu only: on noida-db 0.2.3 this rebalance never ends — after the paused member's
    commit fails (IllegalGeneration, then UnknownMemberId) both members re-join generation 2
    every 30 s for ever (seen 2026-11-28; its group defect when a member drops out,
    /work/shared/kafka.md). Without the pause noida-db completes the rebalance, but only after
    the backlog is drained, which proves nothing here."""
    wl = Workload.make(N_USERS, PER_USER[kind], dup_every=0, seed=36, prefix="moved")
    with running_broker(kind, tmp_path) as broker:
        topics = new_topics(broker.bootstrap, PARTITIONS)
        env = worker_env(broker.url, topics, tmp_path / "data", {
            **EXACT_SUM_SETTINGS, "PUFFERFISH_BROKER_SESSION_TIMEOUT": "30",
            "PUFFERFISH_BROKER_REBALANCE_TIMEOUT": "30",  # the pause is no departure
            "PUFFERFISH_BATCH_MAX_EVENTS": "100"})  # counters move often: paused early
        produce_backlog(broker.bootstrap, topics, wl)
        workers = [start(env, tmp_path, "first")]
        try:
            wait_consumed(workers[0], "report", len(wl.reports) // 20, timeout=120)
            os.kill(workers[0].pid, signal.SIGSTOP)
            try:
                second = {**env, "PUFFERFISH_DATA_DIR": str(tmp_path / "data-b")}
                workers.append(start(second, tmp_path, "second"))
                time.sleep(2.0)  # its consumer joins the group meanwhile
            finally:
                os.kill(workers[0].pid, signal.SIGCONT)
            check_all_counted(broker.bootstrap, topics, wl, workers)
            consumed = [w.metric("pufferfish_events_applied_total", {"kind": "report"}) or 0
                        for w in workers]
            print(f"\nREBALANCE {kind}: reports consumed per worker {consumed}")
            assert consumed[1] > 0, "the rebalance came after the backlog"
            assert sum(consumed) >= len(wl.reports)
        finally:
            for w in workers:
                w.stop()


def test_the_backlog_is_past_the_holds_bound() -> None:
    """The backlogs above would lose reports to the hold alone (64 per user by default)."""
    from stream_app.settings.model import Settings
    assert min(PER_USER.values()) > Settings().max_held_reports_per_user
