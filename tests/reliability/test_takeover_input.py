"""A takeover never skips input (issue 44, defect 2), on Apache Kafka.

Two workers on ``rocksdb://`` with one standby replica, Kafka's minimum session timeout (6 s),
Kafka's default producer and fetch settings (none of tansu's workarounds), each user joins once
and reports once (values 1..5: a lost report shows in the exact sum). While the reports stream
in, the release owner is SIGKILLed; the stream goes on through the survivor's rebalance and
takeover. Once the group's committed offsets reach the end of both input topics, every report
must be in the users changelog (what a restart recovers) and the survivor's releases must show
the exact sum.

Before the fix, a survivor skipped 8-228 contiguous offsets of a partition in 3 of 9 runs: no
dead letter, no log line, its committed offsets past them.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from tests.kafka_broker import KafkaBroker
from tests.kafka_helpers import PacedProducer, read_to_end
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    Cluster,
    Topics,
    committed,
    compat_for,
    group_members,
    laplace_bound,
    new_topics,
    produce_raw,
    read_json,
    run,
    users_changelog,
    wait_for_records,
    wait_until,
)
from tests.reliability.test_crash_recovery import _release_owner
from tests.reliability.workload import Workload

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("kafka")]

PARTITIONS = 4
USERS = 3000
CHUNK, PACE = 25, 0.1  # ~250 reports/s: the stream outlasts the session timeout and takeover
STANDBY = {"PUFFERFISH_STORE": "rocksdb://", "PUFFERFISH_TABLE_STANDBY_REPLICAS": "1"}


def _input_ends(bootstrap: str, topics: Topics) -> dict[str, dict[int, int]]:
    async def ends() -> dict[str, dict[int, int]]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    isolation_level="read_committed")
        await consumer.start()
        try:
            out: dict[str, dict[int, int]] = {}
            for topic in (topics.reports, topics.membership):
                tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
                got = await consumer.end_offsets(tps)
                out[topic] = {tp.partition: got[tp] for tp in tps}
            return out
        finally:
            await consumer.stop()
    return dict(run(ends()))


def _offsets_of(bootstrap: str, topic: str) -> dict[str, tuple[int, int]]:
    """user -> (partition, offset) of its one report."""
    return {r.key.decode(): (r.partition, r.offset)
            for r in run(read_to_end(bootstrap, topic, timeout=60.0)) if r.key is not None}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_owner_sigkilled_under_a_stream_no_report_skipped(kafka_broker: KafkaBroker,
                                                           tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topics = new_topics(bootstrap, PARTITIONS)
    rng = random.Random(44)
    users = [f"{topics.prefix}-u{i:04d}" for i in range(USERS)]
    ts0 = time.time()
    reps = [(u, rng.randint(1, 5), f"{u}-r0", ts0 + i * 1e-3) for i, u in enumerate(users)]
    wl = Workload(users, reps)
    settings = {**EXACT_SUM_SETTINGS, **STANDBY}
    cluster = Cluster(kafka_broker.url, bootstrap, topics, tmp_path, settings,
                      compat=compat_for(kafka_broker))
    try:
        a, b = cluster.start("a"), cluster.start("b")

        def both_own_input() -> bool:
            members = group_members(bootstrap, topics.app_id, topics.reports)
            return len(members) == 2 and all(members.values())

        wait_until(both_own_input, 90, "both workers owning input partitions", 0.5, a)
        produce_raw(bootstrap, wl.joins(topics))
        warm, rest = reps[:CHUNK * 4], reps[CHUNK * 4:]
        produce_raw(bootstrap, Workload.encode(topics, warm))
        victim = wait_until(lambda: _release_owner([a, b]), 60, "the release owner", 0.1, a)
        survivor = b if victim is a else a
        base = victim.metric("pufferfish_events_applied_total", {"kind": "report"}) or 0
        chunks = [Workload.encode(topics, rest[i:i + CHUNK])
                  for i in range(0, len(rest), CHUNK)]
        with PacedProducer(bootstrap, chunks, hold=1, pace=PACE) as feed:
            wait_until(lambda: (victim.metric("pufferfish_events_applied_total",
                                              {"kind": "report"}) or 0) >= base + 200,
                       90, "the victim applying 200 more reports", 0.05, victim)
            sent_at_kill = feed.sent
            victim.kill9()
            feed.release()
        assert sent_at_kill < feed.total
        ends = _input_ends(bootstrap, topics)

        def all_committed() -> bool:
            return all(committed(bootstrap, topics.app_id, topic) == ends[topic]
                       for topic in ends)

        wait_until(all_committed, 120, "the group's offsets committed to the input's end", 1.0,
                   survivor)
        states = users_changelog(bootstrap, topics.app_id)
        expected = wl.expected_sum()
        releases: list[dict[str, Any]] = []
        missing = sorted(u for u in users if sum(states.get(u, {}).get("counts", [])) != 1)
        if not missing:
            releases = wait_for_records(
                bootstrap, topics.releases, lambda recs: recs and abs(
                    recs[-1]["noisy_sum"] - expected) <= laplace_bound(recs[-1]["theta"]),
                60, f"a release of the exact sum {expected}", survivor)
        lost = _offsets_of(bootstrap, topics.reports)
        where = sorted(lost[u] for u in missing)
        print(f"\nRELIABILITY takeover-input: users={USERS}, sent_at_kill={sent_at_kill}, "
              f"victim={victim.name}, lost={len(missing)} {where[:5]}..{where[-5:]}, "
              f"releases={len(releases)}")
    finally:
        cluster.stop()
    assert missing == [], (
        f"{len(missing)} reports never applied, their input committed past them "
        f"(partition, offset): {where}")
    assert read_json(bootstrap, topics.deadletter, 1.0) == []
