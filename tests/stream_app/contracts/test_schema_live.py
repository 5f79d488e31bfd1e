"""Records of a real run validate against the committed schemas (deploy/schemas/).

An embedded broker and a real worker (learning rounds every second, two groups): joins, reports
and leaves, plus malformed and rule-breaking records. Once releases, learning rounds and the
dead letters are out, every topic is read to its end. Every record of releases, priors and
deadletter validates against its schema and has no key; on the input topics a record validates
exactly when the worker did not dead-letter it for a parsing reason (malformed_json,
invalid_schema, non_finite_value): the input schemas are what the worker parses. The dead
letters keep to their documented contract: no value (``raw`` null, the default), and their
partition and offset locate the rejected record on its source topic.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, ConsumerRecord

from stream_app.demo.broker import EmbeddedBroker
from stream_app.kafka.partitioning import partition_for
from tests.kafka_helpers import consume_all, json_values, read_to_end
from tests.stream_app import worker_proc as wp
from tests.stream_app.contracts.contract_files import TOPICS, errors
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PARTITIONS = 2
SETTINGS = {
    "app_id": "contracts", "domain": [0, 1, 2, 3], "groups": ["g1", "g2"], "default_group": "g1",
    "release_period_seconds": "0.5", "learn_period_seconds": "1", "epsilon_learn": "1",
    "learn_min_mass": "1", "budget_total": "100000", "budget_window_seconds": "3600",
    "join_grace_seconds": "0",  # a report before its user's join is refused at once
}
PARSE_REASONS = {"malformed_json", "invalid_schema", "non_finite_value"}
EXPECTED_REASONS = Counter({
    "malformed_json": 2, "invalid_schema": 5, "non_finite_value": 2, "unknown_user": 1,
    "already_present": 1, "key_mismatch": 2, "unknown_group": 1, "out_of_domain": 1,
    "not_present": 1, "duplicate_report": 1, "wrong_partition": 1,
})


def _join(uid: str, group: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"user_id": uid, "event": "join", "ts": time.time()}
    if group is not None:
        event["group"] = group
    return event


def _report(uid: str, value: object, rid: str) -> dict[str, Any]:
    return {"user_id": uid, "value": value, "report_id": rid, "ts": time.time()}


def _strict_json(raw: bytes | None) -> Any:
    """The document, or ``...`` if the bytes are not JSON (NaN and Infinity are not JSON)."""
    def reject(name: str) -> Any:
        raise ValueError(name)

    try:
        return json.loads((raw or b"").decode("utf-8"), parse_constant=reject)
    except ValueError:
        return ...


async def _to_partition(bootstrap: str, topic: str, key: str, value: dict[str, Any],
                       partition: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, json.dumps(value).encode(), key=key.encode(),
                                     partition=partition)
    finally:
        await producer.stop()


def _drive(bootstrap: str, worker: wp.Worker) -> tuple[int, float]:
    """Good and bad input; returns (bad records sent, time the last input was handled)."""
    g1 = [f"u{i}" for i in range(100)]  # enough for a learned law (noisy mass > tail)
    g2 = [f"v{i}" for i in range(6)]
    joins = [(u, _join(u, "g1" if i % 2 else None)) for i, u in enumerate(g1)]
    joins += [(u, _join(u, "g2")) for u in g2]
    n = wp.send(bootstrap, "membership", joins)
    wp.wait_handled([worker], n, timeout=90)
    reports = [(u, _report(u, i % 4, f"{u}-r{k}")) for k in range(2)
               for i, u in enumerate(g1 + g2)]
    n += wp.send(bootstrap, "reports", reports)
    wp.wait_handled([worker], n, timeout=90)  # leaves after the reports: topics interleave
    n += wp.send(bootstrap, "membership", [(u, {"user_id": u, "event": "leave",
                                                "ts": time.time()}) for u in g1[:3]])
    bad_membership: list[tuple[str, Any]] = [
        ("u5", b"{oops"),                                               # malformed_json
        ("d", {"user_id": "d", "event": "join"}),                       # invalid_schema
        ("d", {"user_id": "d", "event": "enter", "ts": 1.0}),           # invalid_schema
        ("e", b'{"user_id": "e", "event": "join", "ts": NaN}'),         # non_finite_value
        ("zz", {"user_id": "zz", "event": "leave", "ts": 1.0}),         # unknown_user
        ("u7", _join("u7")),                                            # already_present
        ("b", _join("c")),                                              # key_mismatch
        ("f", _join("f", "nope")),                                      # unknown_group
    ]
    bad_reports: list[tuple[str, Any]] = [
        ("u5", b"not json"),                                            # malformed_json
        ("u5", None),                                                   # JSON null: invalid_schema
        ("u5", {"user_id": "u5", "report_id": "x", "ts": 1.0}),         # invalid_schema
        ("u5", _report("u5", "1", "s")),                                # invalid_schema
        ("u5", b'{"user_id": "u5", "value": NaN, "report_id": "y", "ts": 1}'),  # non_finite
        ("u5", _report("u5", 99, "z")),                                 # out_of_domain
        ("nobody", _report("nobody", 1, "q")),                          # not_present
        ("u9", _report("u9", 1, "u9-r0")),                              # duplicate_report
        ("u8", _report("u9", 1, "k")),                                  # key_mismatch
    ]
    n += wp.send(bootstrap, "membership", bad_membership)
    n += wp.send(bootstrap, "reports", bad_reports)
    home = partition_for(b"u11", PARTITIONS)
    asyncio.run(_to_partition(bootstrap, "reports", "u11", _report("u11", 2, "wp"),
                              (home + 1) % PARTITIONS))                 # wrong_partition
    n += 1
    wp.wait_handled([worker], n, timeout=90)
    return len(bad_membership) + len(bad_reports) + 1, time.time()


def _read_all(bootstrap: str) -> dict[str, list[ConsumerRecord[bytes, bytes]]]:
    return {topic: asyncio.run(read_to_end(bootstrap, topic, timeout=60)) for topic in TOPICS}


@pytest.mark.slow
def test_records_of_a_real_run_validate(broker: EmbeddedBroker, tmp_path: Path) -> None:
    env = wp.input_env(broker, tmp_path, PARTITIONS, **SETTINGS)
    worker = wp.start_worker(env, tmp_path, "w")
    try:
        bad, since = _drive(broker.bootstrap, worker)

        def dead_letters() -> int:
            records = asyncio.run(consume_all(broker.bootstrap, "deadletter", 1.0, bad))
            return len(records)

        wait_for(lambda: dead_letters() >= bad, 60, f"{bad} dead letters",
                      detail=worker.log)

        def rounds_after_input() -> bool:
            priors = json_values(asyncio.run(consume_all(broker.bootstrap, "priors", 1.0)))
            return len({p["seq"] for p in priors if p["ts"] > since}) >= 2

        wait_for(rounds_after_input, 90, "2 learning rounds after the input",
                      detail=worker.log)
        wp.releases_after(broker.bootstrap, since, 2, timeout=60)
    finally:
        assert worker.stop() == 0, worker.log()
    records = _read_all(broker.bootstrap)

    for topic in ("releases", "priors", "deadletter"):
        assert records[topic], f"nothing on {topic}"
        for r in records[topic]:
            assert r.key is None, (topic, r)
            assert errors(topic, _strict_json(r.value)) == [], (topic, r.value)
    letters = [json.loads(r.value) for r in records["deadletter"]]
    assert Counter(d["reason"] for d in letters) == EXPECTED_REASONS
    assert len(letters) == bad == EXPECTED_REASONS.total()
    assert {p["status"] for p in json_values(records["priors"])} & {"learned"}
    assert any(r["priors_seq"] >= 1 for r in json_values(records["releases"]))
    # the documented contract (README, docs/design.md, the schema): never the values by
    # default, and partition + offset locate the rejected record on its source topic
    assert all(d["raw"] is None for d in letters), [d["raw"] for d in letters]
    sent = {(topic, r.partition, r.offset): r for topic in ("reports", "membership")
            for r in records[topic]}
    located = {(d["source_topic"], d["partition"], d["offset"]) for d in letters}
    assert len(located) == len(letters) and located <= set(sent), located - set(sent)
    parse_rejected = {(d["source_topic"], d["partition"], d["offset"]) for d in letters
                      if d["reason"] in PARSE_REASONS}
    assert len(parse_rejected) == sum(EXPECTED_REASONS[r] for r in PARSE_REASONS)
    for (topic, _, _), r in sent.items():
        doc = _strict_json(r.value)
        valid = doc is not ... and errors(topic, doc) == []
        rejected = (topic, r.partition, r.offset) in parse_rejected
        assert valid != rejected, (topic, r.key, r.value, valid, rejected)
    out_of_domain = next(d for d in letters if d["reason"] == "out_of_domain")
    assert json.loads(sent["reports", out_of_domain["partition"],
                           out_of_domain["offset"]].value)["value"] == 99
