"""A worker consuming reports written in Kafka transactions, on a broker that has them
(noida-db; tansu has no transactions through aiokafka).

Each commit marker takes an offset, so the consumer sees a gap after every transaction. The
worker's drain loop (stream_app/faust_adapter/consumer.py) must hand over every report once without
treating those gaps as lost records: its seeks (``pufferfish_consumer_seeks_total``) stay in
single digits, where a seek back per gap would make about one per transaction.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer

from stream_app.faust_adapter.consumer import STALL_CHECK_SECONDS
from stream_app.kafka.partitioning import partition_for
from tests.noida_broker import NoidaBroker
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    Topics,
    Worker,
    join,
    laplace_bound,
    new_topics,
    users_changelog,
    wait_consumed,
    wait_counted,
    wait_for_records,
    wait_ready,
    worker_env,
)
from tests.reliability.workload import Workload, histogram_mismatches

pytestmark = [pytest.mark.integration]

TRANSACTIONS, PER_TRANSACTION = 1_000, 10
PARTITIONS = 2


def _produce_in_transactions(bootstrap: str, topics: Topics, wl: Workload) -> None:
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"reports-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    records = wl.encode(topics, wl.reports)
    for start in range(0, len(records), PER_TRANSACTION):
        producer.begin_transaction()
        for topic, key, value in records[start:start + PER_TRANSACTION]:
            assert key is not None
            producer.produce(topic, value=value, key=key,
                             partition=partition_for(key, PARTITIONS))
        producer.commit_transaction(30)


@contextmanager
def joined_worker(tmp_path: Path, wl: Workload, name: str
                  ) -> Iterator[tuple[NoidaBroker, Topics, Worker]]:
    """noida-db, fresh topics and a worker to which the workload's users have joined."""
    broker = NoidaBroker(tmp_path / "noida", tmp_path / "noida.log").start()
    worker: Worker | None = None
    try:
        topics = new_topics(broker.bootstrap, PARTITIONS)
        env = worker_env(broker.url, topics, tmp_path / "data", EXACT_SUM_SETTINGS)
        worker = Worker(env, tmp_path, name).start()
        wait_ready(worker)
        join(broker.bootstrap, topics, worker, wl.users)
        yield broker, topics, worker
    finally:
        if worker is not None:
            worker.stop()
        broker.stop()


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_reports_written_in_transactions_are_counted_once_with_few_seeks(
    tmp_path: Path,
) -> None:
    wl = Workload.make(n_users=40, per_user=TRANSACTIONS * PER_TRANSACTION // 40, dup_every=0,
                       seed=11, prefix="tx")
    assert len(wl.reports) == TRANSACTIONS * PER_TRANSACTION
    with joined_worker(tmp_path, wl, "transactions") as (broker, topics, worker):
        _produce_in_transactions(broker.bootstrap, topics, wl)
        wait_consumed(worker, "report", len(wl.reports), timeout=240)
        # The counter moves when a batch is applied, before its changelog records are even
        # sent, and the sum cannot tell (seed 11: 197 prefixes of the input, the last with one
        # report left, already show the final 88): the histograms are read once the changelog
        # itself counts every report (read to its end: counts only grow).
        wait_counted(broker.bootstrap, topics, len(wl.reports), worker, 120, to_end=True)
        expected = wl.expected_sum()
        releases = wait_for_records(
            broker.bootstrap, topics.releases,
            lambda recs: bool(recs) and abs(recs[-1]["noisy_sum"] - expected)
            <= laplace_bound(recs[-1]["theta"]),
            120, f"a release of the exact sum {expected}", worker)
        consumed = worker.metric("pufferfish_events_applied_total", {"kind": "report"})
        rejected = worker.metric("pufferfish_events_rejected_total",
                                 {"reason": "duplicate_report"})
        seeks = worker.metric("pufferfish_consumer_seeks_total")
        refetch_lines = worker.output().count("again from offset")
        states = users_changelog(broker.bootstrap, topics.app_id)
    print(f"\nTRANSACTIONS {TRANSACTIONS}x{PER_TRANSACTION}: consumed={consumed}, "
          f"duplicates={rejected}, seeks={seeks}, refetch log lines={refetch_lines}, "
          f"releases={len(releases)}")
    assert consumed == len(wl.reports)  # each report counted once ...
    assert rejected == 0  # ... and none handed over twice (dedup would have rejected it)
    assert histogram_mismatches(wl, states) == {}
    assert seeks is not None and seeks < 10, f"{seeks} seeks for {TRANSACTIONS} gaps"


# noida-db: 0 seeks with the stall watch's accounting, 2 per idle period without it (20 over
# 10 periods, issue 34's figure): 4 periods tell them apart (the bound is half the defect's 8)
IDLE_PERIODS = 4
IDLE_SECONDS = 2 * STALL_CHECK_SECONDS + 1.5  # two stall checks see the partition idle


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_idle_periods_after_transactions_cost_no_seek_each(tmp_path: Path) -> None:
    """Bursts of 3 transactions, each followed by an idle period: the client then sits one past
    the last report handed over (the commit marker). The stall watch must know that the fetch
    itself moved it there (issue 34: a seek per partition per idle period, 4, 8, ..., 20)."""
    wl = Workload.make(n_users=8, per_user=IDLE_PERIODS * 3 * 4 // 8, dup_every=0, seed=12,
                       prefix="idle")
    with joined_worker(tmp_path, wl, "idle") as (broker, topics, worker):
        producer = Producer({"bootstrap.servers": broker.bootstrap,
                             "transactional.id": f"idle-{uuid.uuid4().hex[:8]}"})
        producer.init_transactions(30)
        records = wl.encode(topics, wl.reports)
        per_burst = len(records) // IDLE_PERIODS
        for burst in range(IDLE_PERIODS):
            for start in range(burst * per_burst, (burst + 1) * per_burst, 4):
                producer.begin_transaction()
                for topic, key, value in records[start:start + 4]:
                    assert key is not None
                    producer.produce(topic, value=value, key=key,
                                     partition=partition_for(key, PARTITIONS))
                producer.commit_transaction(30)
            wait_consumed(worker, "report", (burst + 1) * per_burst, timeout=60)
            time.sleep(IDLE_SECONDS)
        seeks = worker.metric("pufferfish_consumer_seeks_total")
        consumed = worker.metric("pufferfish_events_applied_total", {"kind": "report"})
    print(f"\nIDLE PERIODS {IDLE_PERIODS}: seeks={seeks}, consumed={consumed}")
    assert consumed == len(wl.reports)
    assert seeks is not None and seeks < IDLE_PERIODS, (
        f"{seeks} seeks over {IDLE_PERIODS} idle periods")
