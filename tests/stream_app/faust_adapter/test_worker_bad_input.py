"""Bad input on both input topics -> dead letters with the right reasons; the worker stays up."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from stream_app.demo.broker import EmbeddedBroker
from stream_app.domain.rejection import REJECT_REASONS
from stream_app.kafka.partitioning import partition_for
from tests.kafka_helpers import consume_all, json_values
from tests.stream_app import worker_proc as wp

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def rep(uid: str, value: object, rid: str) -> dict:
    return {"user_id": uid, "value": value, "report_id": rid, "ts": time.time()}


def join(uid: str, group: str = "g1") -> dict:
    return {"user_id": uid, "event": "join", "group": group, "ts": time.time()}


async def produce_to(bootstrap: str, topic: str, key: bytes, value: dict, partition: int) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, json.dumps(value).encode(), key=key,
                                     partition=partition)
    finally:
        await producer.stop()
    return 1


def test_bad_input_is_dead_lettered(broker: EmbeddedBroker, tmp_path: Path) -> None:
    priors = tmp_path / "priors.json"  # declares the known groups
    priors.write_text('{"g1": {"support": [0, 1], "probs": [0.5, 0.5]}}')
    env = wp.input_env(
        broker, tmp_path, 2, app_id="bad", domain=[0, 1, 2, 5],
        pairs=["value_presence"], release_period_seconds="0.5", max_payload_bytes="1024",
        priors_file=str(priors), join_grace_seconds="0",  # a report before a join: refused
        deadletter_include_raw="true",  # the raw bytes are checked below
    )
    worker = wp.start_worker(env, tmp_path, "w")
    try:
        n = wp.send(broker.bootstrap, "membership", [(u, join(u)) for u in ("a", "b", "c")])
        wp.wait_handled([worker], n, timeout=60)

        membership_bad = [
            ("a", b"{oops", "malformed_json"),
            ("d", {"user_id": "d", "event": "join"}, "invalid_schema"),
            ("e", b'{"user_id": "e", "event": "join", "ts": NaN}', "non_finite_value"),
            ("zz", {"user_id": "zz", "event": "leave", "ts": 1.0}, "unknown_user"),
            ("a", join("a"), "already_present"),
            ("b", join("c"), "key_mismatch"),
            ("f", join("f", group="nope"), "unknown_group"),
            ("d", join("d"), None),  # good record among the bad ones
        ]
        reports_bad = [
            ("a", b"not json", "malformed_json"),
            ("a", {"user_id": "a", "report_id": "x", "ts": 1.0}, "invalid_schema"),
            ("a", b'{"user_id": "a", "value": NaN, "report_id": "y", "ts": 1}', "non_finite_value"),
            ("a", rep("a", 99, "z"), "out_of_domain"),
            ("nobody", rep("nobody", 1, "q"), "not_present"),
            ("a", rep("a", 2, "r1"), None),
            ("a", rep("a", 2, "r1"), "duplicate_report"),
            ("b", rep("a", 1, "r9"), "key_mismatch"),
            ("b", {**rep("b", 1, "big"), "pad": "x" * 2000}, "payload_too_large"),
            ("b", rep("b", 5, "r2"), None),
            (None, rep("c", 1, "nokey"), "key_mismatch"),
        ]
        n += wp.send(broker.bootstrap, "membership", [(k, v) for k, v, _ in membership_bad])
        n += wp.send(broker.bootstrap, "reports", [(k, v) for k, v, _ in reports_bad])
        # a valid report of a present user on a partition other than murmur2("a") mod 2
        stray = (partition_for(b"a", 2) + 1) % 2
        n += asyncio.run(produce_to(broker.bootstrap, "reports", b"a", rep("a", 1, "wp"), stray))
        wp.wait_handled([worker], n)

        expected = Counter(r for _, _, r in membership_bad + reports_bad if r is not None)
        expected["wrong_partition"] += 1
        letters = json_values(asyncio.run(consume_all(
            broker.bootstrap, "deadletter", timeout=60, min_count=sum(expected.values()))))
        assert Counter(d["reason"] for d in letters) == expected
        by_topic = Counter((d["source_topic"], d["reason"]) for d in letters)
        assert by_topic[("membership", "malformed_json")] == 1
        assert by_topic[("reports", "malformed_json")] == 1
        for d in letters:
            assert set(d) == {"source_topic", "raw", "reason", "ts", "partition", "offset",
                              "detail"}
            assert d["reason"] in REJECT_REASONS
            assert len(d["raw"].encode()) <= 256 * 4
        big = next(d for d in letters if d["reason"] == "payload_too_large")
        assert len(big["raw"]) == 256 and big["raw"].startswith('{"user_id": "b"')

        m = worker.samples()
        assert set(expected) == set(REJECT_REASONS)  # every reason exercised
        for reason in REJECT_REASONS:
            got = m[("pufferfish_events_rejected_total", (("reason", reason),))]
            assert got == expected[reason], reason
        assert m[("pufferfish_events_applied_total", (("kind", "membership"),))] == 4
        assert m[("pufferfish_events_applied_total", (("kind", "report"),))] == 2

        # the good records around the bad ones made it into the releases: X = 2 + 5
        drained = time.time()

        records = wp.releases_after(broker.bootstrap, drained + 1.0, 2, timeout=60)
        got = [r for r in records if r["ts"] > drained + 1.0]
        for r in got:
            # value_presence over supp(P_g1) = {0, 1}: max |a| / eps = 1, whatever was reported
            assert r["theta"] == pytest.approx(1.0)
            assert abs(r["noisy_sum"] - 7.0) <= wp.noise_bound(1.0, len(got))
        assert worker.alive()
    finally:
        rc = worker.stop()
    assert rc == 0, worker.log()
