"""A takeover never skips input (issue 44, defect 2), on Apache Kafka.

Two workers on ``rocksdb://`` with one standby replica, Kafka's minimum session timeout (6 s),
Kafka's default producer and fetch settings (none of tansu's workarounds). A steady stream of
new users runs through the whole test, each joining and reporting once (values 1..5: a report
not applied shows in the exact sum). In each of ROUNDS rounds the release owner is SIGKILLed
mid-stream, the survivor takes its partitions over, and the killed worker starts again (its
RocksDB kept) and rejoins: every round is two rebalances under load. Once the stream stops and
the group's committed offsets reach the end of both input topics, every report must be in the
users changelog (what a restart recovers) and the releases must show the exact sum.

Before the fix (docs/design.md, "The gate"): a seek to the committed offsets runs in the client
thread partition by partition while a fetch comes back; the gate kept the records fetched from
the new position, dropped them at the seek's end as if fetched before it, and the next record
acknowledged them as a gap. The issue saw 8-228 contiguous offsets of a partition lost in 3 of 9
one-kill runs. This test without the fix (2026-11-29, load average 3-10): 3 of 4 runs lost 251,
693 and 457 reports (with 4 input partitions: 2 of 4 runs, 518 and 143; 8 partitions make the
seek of the committed offsets, one round trip per partition, last longer); with it, 6 of 6
runs (18 kills) lost none, each fetching 6-19 input partitions again after such a seek.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.kafka_broker import KafkaBroker
from tests.kafka_helpers import Record, SteadyStream, read_to_end
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    Cluster,
    Topics,
    Worker,
    committed,
    compat_for,
    group_members,
    laplace_bound,
    membership,
    new_topics,
    read_json,
    report,
    run,
    users_changelog,
    wait_for_records,
    wait_until,
)
from tests.reliability.test_crash_recovery import _release_owner

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("kafka")]

PARTITIONS = 8
ROUNDS = 3
PER_TICK, PACE = 10, 0.1  # ~100 new users a second, each a join and a report
STANDBY = {"PUFFERFISH_STORE": "rocksdb://", "PUFFERFISH_TABLE_STANDBY_REPLICAS": "1"}


def value_of(i: int) -> int:
    return 1 + i % 5


def _input_ends(bootstrap: str, topics: Topics) -> dict[str, dict[int, int]]:
    """The end offset of every input partition (the stream has stopped)."""
    out: dict[str, dict[int, int]] = {}
    for topic in (topics.reports, topics.membership):
        ends: dict[int, int] = {}
        for r in run(read_to_end(bootstrap, topic, timeout=60.0)):
            ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
        out[topic] = ends
    return out


def _owners(bootstrap: str, topics: Topics, members: int) -> bool:
    """The group is stable with `members` members, each owning input partitions."""
    owned = group_members(bootstrap, topics.app_id, topics.reports)
    return len(owned) == members and all(owned.values())


def _kill_the_owner(bootstrap: str, topics: Topics, live: dict[str, Worker],
                    stream: SteadyStream) -> tuple[str, int]:
    """One round: once both workers own input partitions, SIGKILL the release owner after it
    applied 100 more reports, and wait until the survivor owns every input partition. Returns
    (the victim's name, users sent at the kill)."""
    wait_until(lambda: _owners(bootstrap, topics, 2), 90, "both workers owning input partitions",
               0.5, live["a"])
    workers = list(live.values())
    victim: Worker = wait_until(lambda: _release_owner(workers), 60, "the release owner", 0.1,
                                workers[0])
    survivor = next(w for w in workers if w is not victim)
    base = victim.metric("pufferfish_events_applied_total", {"kind": "report"}) or 0
    wait_until(lambda: (victim.metric("pufferfish_events_applied_total", {"kind": "report"})
                        or 0) >= base + 100, 60, "the victim applying 100 more reports", 0.1,
               victim)
    at_kill = stream.done
    victim.kill9()
    wait_until(lambda: _owners(bootstrap, topics, 1), 90,
               "the survivor owning every input partition", 0.5, survivor)
    return victim.name, at_kill


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_owner_sigkilled_under_a_stream_no_report_skipped(kafka_broker: KafkaBroker,
                                                           tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap
    topics = new_topics(bootstrap, PARTITIONS)
    t0 = time.time()

    def user(i: int) -> str:
        return f"{topics.prefix}-u{i:05d}"

    def records_for(i: int) -> list[Record]:
        u, ts = user(i), t0 + i * 1e-3
        return [(topics.membership, u.encode(), membership(u, "join", ts)),
                (topics.reports, u.encode(), report(u, value_of(i), f"{u}-r0", ts))]

    settings = {**EXACT_SUM_SETTINGS, **STANDBY}
    cluster = Cluster(kafka_broker.url, bootstrap, topics, tmp_path, settings,
                      compat=compat_for(kafka_broker))
    kills: list[tuple[str, int]] = []  # (worker, users sent at its kill)
    try:
        live = {"a": cluster.start("a"), "b": cluster.start("b")}
        with SteadyStream(bootstrap, records_for, PER_TICK, PACE) as stream:
            for round_ in range(ROUNDS):
                kills.append(_kill_the_owner(bootstrap, topics, live, stream))
                if round_ < ROUNDS - 1:
                    name = kills[-1][0][0]
                    live[name] = cluster.start(name)  # its data_dir (RocksDB) kept
        sent = stream.done
        survivor = next(w for w in live.values() if w.alive())
        ends = _input_ends(bootstrap, topics)

        def all_committed() -> bool:
            return all(committed(bootstrap, topics.app_id, topic) == ends[topic]
                       for topic in ends)

        wait_until(all_committed, 120, "the group's offsets committed to the input's end", 1.0,
                   survivor)
        states = users_changelog(bootstrap, topics.app_id)
        missing = [i for i in range(sent)
                   if sum(states.get(user(i), {}).get("counts", [])) != 1]
        expected = sum(value_of(i) for i in range(sent))
        releases: list[dict[str, Any]] = []
        if not missing:
            releases = wait_for_records(
                bootstrap, topics.releases, lambda recs: recs and abs(
                    recs[-1]["noisy_sum"] - expected) <= laplace_bound(recs[-1]["theta"]),
                60, f"a release of the exact sum {expected}", survivor)
        offsets = {r.key.decode(): (r.partition, r.offset)
                   for r in run(read_to_end(bootstrap, topics.reports, timeout=60.0))
                   if r.key is not None}
        lost = sorted(offsets[user(i)] for i in missing)
        print(f"\nRELIABILITY takeover-input: users={sent}, kills (worker, users sent)={kills}, "
              f"lost={len(lost)} {lost[:3]}..{lost[-3:]}, releases={len(releases)}")
    finally:
        cluster.stop()
    assert lost == [], (
        f"{len(lost)} reports never applied, the input committed past them "
        f"(partition, offset): {lost}")
    assert read_json(bootstrap, topics.deadletter, 1.0) == []
