"""The partitioning contract on a real broker, two workers, producers with confluent-kafka.

Joins produced with aiokafka (murmur2) and reports with confluent-kafka's default
partitioner (librdkafka consistent_random, CRC32) used to be dead-lettered ``not_present`` when
the report's partition belonged to another worker. Now every misrouted record is dead-lettered
``wrong_partition`` (and none ``not_present``); with ``partitioner=murmur2_random`` nothing is
dead-lettered and the workers' exact sums (the partials) hold every report.

Which records are misrouted is decided here from the partition the broker acknowledged for each
record and aiokafka's murmur2 (not the worker's implementation).
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka.partitioner import murmur2

from stream_app.demo.broker import EmbeddedBroker
from stream_app.metrics_page import totals
from tests.kafka_helpers import json_values, read_to_end
from tests.stream_app import worker_proc as wp
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PARTS = 4
DOMAIN = (0.0, 1.0, 2.0, 3.0)
UNITS = 1024  # grid 2**-10 (the default grid_log2)


def java_partition(user: str) -> int:
    return (murmur2(user.encode()) & 0x7FFFFFFF) % PARTS


def confluent_send(
    bootstrap: str, topic: str, records: list[tuple[str, dict[str, Any]]],
    partitioner: str | None,
) -> list[int]:
    """Produce (user_id, doc) with confluent-kafka (its default partitioner when None); the
    partition the broker acknowledged for each record, in order."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if partitioner is not None:
        config["partitioner"] = partitioner
    producer = confluent_kafka.Producer(config)
    landed: dict[int, int] = {}

    def delivered(i: int) -> Any:
        def callback(err: Any, msg: Any) -> None:
            assert err is None, err
            landed[i] = msg.partition()
        return callback

    for i, (user, doc) in enumerate(records):
        producer.produce(topic, value=json.dumps(doc).encode(), key=user.encode(),
                         on_delivery=delivered(i))
    assert producer.flush(60) == 0
    return [landed[i] for i in range(len(records))]


class Stream:
    """What was sent, and what the contract says the workers must do with it."""

    def __init__(self) -> None:
        self.ts = time.time()
        self.present: set[str] = set()
        self.latest: dict[str, float] = {}
        self.expected: Counter[tuple[str, str]] = Counter()  # (phase, reason)
        self.misrouted = 0

    def doc(self, user: str, kind: str, k: int, value: float = 0.0) -> dict[str, Any]:
        self.ts += 0.001
        if kind == "join":
            return {"user_id": user, "event": "join", "ts": self.ts}
        return {"user_id": user, "value": value, "report_id": f"r{k}", "ts": self.ts}

    def outcome(self, phase: str, kind: str, user: str, partition: int, value: float) -> None:
        if partition != java_partition(user):
            self.expected[phase, "wrong_partition"] += 1
            self.misrouted += 1
        elif kind == "join":
            self.present.add(user)
        else:
            assert user in self.present  # the join was routed, hence accepted
            self.latest[user] = value

    def sum_units(self) -> int:
        return sum(round(v * UNITS) for u, v in self.latest.items() if u in self.present)


def dead_letters_by_phase(bootstrap: str) -> Counter[tuple[str, str]]:
    """(phase, reason) of every dead letter; the barriers' phases are "warm" (sent while the
    group still forms) and "barrier" (after)."""
    out: Counter[tuple[str, str]] = Counter()
    for d in json_values(asyncio.run(read_to_end(bootstrap, "deadletter"))):
        user = json.loads(d["raw"])["user_id"]
        phase = user.split("-")[0]
        if phase == "barrier":
            phase = "warm" if user.startswith("barrier-warm") else "barrier"
        out[phase, d["reason"]] += 1
    return out


def exact_sum(bootstrap: str) -> int:
    """Sum of the newest partial of every input partition (exact, no noise)."""
    newest: dict[int, int] = {}
    for p in json_values(asyncio.run(read_to_end(bootstrap, "pufferfish-partials"))):
        newest[p["partition"]] = p["sum_units"]
    return sum(newest.values())


def rejected(workers: list[wp.Worker], reason: str) -> float:
    return sum(w.samples().get(
        ("pufferfish_events_rejected_total", (("reason", reason),)), 0.0) for w in workers)


@pytest.mark.slow
def test_confluent_producers_two_workers(broker: EmbeddedBroker, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap
    env = wp.input_env(
        broker, tmp_path, PARTS, app_id="contract", domain=list(DOMAIN),
        pairs=["value_presence"], budget_total="10000", release_period_seconds="0.5",
        deadletter_include_raw="true",  # the dead letters' users tell the phases apart
    )
    workers = [wp.start_worker(env, tmp_path, "w1"), wp.start_worker(env, tmp_path, "w2")]
    barriers = 0

    def sync(tag: str) -> None:
        nonlocal barriers
        wp.barrier(bootstrap, PARTS, tag)
        barriers += 1

    try:
        deadline = time.monotonic() + 120
        while not all(wp.handled([w]) > 0 for w in workers):  # both own input partitions
            assert time.monotonic() < deadline, "the two workers never shared the partitions"
            assert all(w.alive() for w in workers), [w.log() for w in workers]
            sync(f"warm{barriers}")
        warm_barriers = barriers

        s = Stream()
        k = 0

        def reports(users: list[str], each: int) -> list[tuple[str, dict[str, Any]]]:
            nonlocal k
            out = []
            for j in range(each):
                for i, u in enumerate(users):
                    k += 1
                    out.append((u, s.doc(u, "report", k, DOMAIN[(i + j) % len(DOMAIN)])))
            return out

        # 1. the mix: joins with aiokafka (murmur2), reports with confluent's default
        mix = [f"mix-{i}" for i in range(20)]
        wp.send(bootstrap, "membership", [(u, s.doc(u, "join", 0)) for u in mix])
        for u in mix:
            s.outcome("mix", "join", u, java_partition(u), 0.0)
        sync("mix-joined")
        batch = reports(mix, 2)
        landed = confluent_send(bootstrap, "reports", batch, partitioner=None)
        assert landed == [zlib.crc32(u.encode()) % PARTS for u, _ in batch]  # CRC32
        for (u, doc), p in zip(batch, landed, strict=True):
            s.outcome("mix", "report", u, p, doc["value"])
        sync("mix-reported")

        # 2. both topics with confluent's default: misrouted joins too (and their reports)
        crc = [f"crc-{i}" for i in range(12)]
        joins = [(u, s.doc(u, "join", 0)) for u in crc]
        for (u, _), p in zip(joins, confluent_send(bootstrap, "membership", joins, None),
                             strict=True):
            s.outcome("crc", "join", u, p, 0.0)
        sync("crc-joined")
        batch = reports(crc, 2)
        for (u, doc), p in zip(batch, confluent_send(bootstrap, "reports", batch, None),
                               strict=True):
            s.outcome("crc", "report", u, p, doc["value"])
        sync("crc-reported")

        # 3. confluent-kafka with partitioner=murmur2_random: the contract
        good = [f"good-{i}" for i in range(20)]
        joins = [(u, s.doc(u, "join", 0)) for u in good]
        for (u, _), p in zip(joins, confluent_send(bootstrap, "membership", joins,
                                                   "murmur2_random"), strict=True):
            assert p == java_partition(u)
            s.outcome("good", "join", u, p, 0.0)
        sync("good-joined")
        batch = reports(good, 2)
        for (u, doc), p in zip(batch, confluent_send(bootstrap, "reports", batch,
                                                     "murmur2_random"), strict=True):
            assert p == java_partition(u)
            s.outcome("good", "report", u, p, doc["value"])
        sync("good-reported")

        # the scenario really has both kinds of records in phases 1 and 2
        assert 0 < s.expected["mix", "wrong_partition"] < 40
        assert 0 < s.expected["crc", "wrong_partition"] < 36
        assert s.expected["good", "wrong_partition"] == 0

        # every misrouted record dead-lettered wrong_partition, none not_present, nothing else;
        # each barrier record on the N - 1 other partitions of each topic is wrong_partition,
        # the one on the right partition out_of_domain (reports) or unknown_user (leaves).
        # A warm-up barrier handled before a rebalance may be handled again after it (input is
        # at least once): those only have a lower bound
        letters = dead_letters_by_phase(bootstrap)
        ours = +Counter({key: n for key, n in letters.items()
                         if key[0] not in ("warm", "barrier")})
        assert ours == +s.expected
        after = barriers - warm_barriers
        fence = {r: n for (phase, r), n in letters.items() if phase == "barrier"}
        assert fence["wrong_partition"] == after * 2 * (PARTS - 1), fence
        assert fence["out_of_domain"] == after and sum(fence.values()) == after * 2 * PARTS
        warm = {r: n for (phase, r), n in letters.items() if phase == "warm"}
        assert warm.get("wrong_partition", 0) >= warm_barriers * 2 * (PARTS - 1), warm
        assert warm.get("out_of_domain", 0) >= warm_barriers, warm
        # the metrics count every dead letter, a repeated one too
        total = sum(n for (_, r), n in letters.items() if r == "wrong_partition")
        wait_for(lambda: rejected(workers, "wrong_partition") == total, 30,
                 f"{total} wrong_partition in the metrics",
                 detail=lambda: f"each {[rejected([w], 'wrong_partition') for w in workers]}; "
                 f"dead letters {dict(letters)}")
        assert rejected(workers, "out_of_domain") == sum(
            n for (_, r), n in letters.items() if r == "out_of_domain")
        consumed = sum(totals(w.samples()).get(
            "pufferfish_events_applied_total", 0.0) for w in workers)
        assert consumed == 20 + 12 + 20 + 40 + 24 + 40 - s.misrouted

        # the exact sum over both workers' partitions: every accepted report's user, latest value
        want_units = s.sum_units()
        assert want_units > 0
        wait_for(lambda: exact_sum(bootstrap) == want_units, 30,
                 f"partials summing to {want_units} units")
        assert all(w.alive() for w in workers)
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.log() for w in workers]
