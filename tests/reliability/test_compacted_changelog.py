"""A compacted users changelog, then a restart, on Apache Kafka: the broker's log cleaner keeps
only each user's newest changelog record (offset gaps wherever superseded records were), and a
restarted worker on the memory store restores every user from that log: its recovery must
complete across the gaps (Faust takes the end offset as done) and the state must be exact.

tansu and noida-db never compact (../shared/kafka.md), so this runs on Kafka only. The changelog
topic is created by the test before the worker starts, as an operator may, compacted with
aggressive cleaner settings (a segment rolled every 100 ms, any dirty ratio cleaned, no lag);
the broker's cleaner looks for work every second (tests/kafka_broker.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.kafka_broker import KafkaBroker
from tests.kafka_helpers import PacedProducer, read_to_end
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    Worker,
    compat_for,
    laplace_bound,
    new_topics,
    produce_raw,
    run,
    users_changelog,
    wait_consumed,
    wait_counted,
    wait_for_records,
    wait_ready,
    wait_until,
    worker_env,
)
from tests.reliability.workload import Workload, histogram_mismatches

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("kafka")]

PARTITIONS = 2
ROUNDS = 40
AGGRESSIVE = {"cleanup.policy": "compact", "segment.ms": "100",
              "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"}


async def _create_compacted(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1, topic_configs=AGGRESSIVE)])
    finally:
        await admin.close()


def _offsets_kept(bootstrap: str, topic: str) -> tuple[int, int]:
    """(records in the log, offsets the log spans): fewer records than offsets once compacted."""
    records = run(read_to_end(bootstrap, topic, timeout=60.0))
    spans: dict[int, int] = {}
    for r in records:
        spans[r.partition] = max(spans.get(r.partition, 0), r.offset + 1)
    return len(records), sum(spans.values())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_compacted_changelog_restores_every_user_exactly(kafka_broker: KafkaBroker,
                                                           tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topics = new_topics(bootstrap, PARTITIONS)
    changelog = f"{topics.app_id}-users-changelog"
    asyncio.run(_create_compacted(bootstrap, changelog))
    wl = Workload.make(n_users=40, per_user=ROUNDS + 1, dup_every=0, seed=5, prefix="cmp")
    rounds = [wl.reports[i:i + len(wl.users)] for i in range(0, len(wl.reports), len(wl.users))]
    before, last = [r for chunk in rounds[:-1] for r in chunk], rounds[-1]
    # every batch writes its users' states (no write window): ~ROUNDS records per user
    settings = {**EXACT_SUM_SETTINGS, "PUFFERFISH_CHANGELOG_FLUSH_SECONDS": "0"}
    env = worker_env(kafka_broker.url, topics, tmp_path / "data", settings,
                     compat=compat_for(kafka_broker))
    worker = Worker(env, tmp_path, "before").start()
    try:
        wait_ready(worker)
        produce_raw(bootstrap, wl.joins(topics))
        wait_consumed(worker, "membership", len(wl.users))
        chunks = [Workload.encode(topics, chunk) for chunk in rounds[:-1]]
        with PacedProducer(bootstrap, chunks, hold=1, pace=0.1):
            pass  # every round sent, one every 0.1 s
        wait_counted(bootstrap, topics, len(before), worker, to_end=True)

        def compacted() -> tuple[int, int] | None:
            kept, spanned = _offsets_kept(bootstrap, changelog)
            return (kept, spanned) if kept * 2 < spanned else None

        kept, spanned = wait_until(compacted, 90, "the log cleaner compacting the changelog",
                                   1.0, worker)
        assert worker.stop() == 0, worker.tail()
        worker = Worker(env, tmp_path, "after").start()
        wait_ready(worker)
        # the last round: each user's new state is its restored one plus one report
        produce_raw(bootstrap, Workload.encode(topics, last))
        wait_counted(bootstrap, topics, len(wl.reports), worker, to_end=True)
        expected = wl.expected_sum()
        wait_for_records(bootstrap, topics.releases, lambda recs: recs and abs(
            recs[-1]["noisy_sum"] - expected) <= laplace_bound(recs[-1]["theta"]),
            60, f"a release of the exact sum {expected}", worker)
        states = users_changelog(bootstrap, topics.app_id)
    finally:
        worker.stop()
    print(f"\nRELIABILITY compacted-changelog: the users changelog kept {kept} records of the "
          f"{spanned} offsets written before the restart")
    assert histogram_mismatches(wl, states) == {}
