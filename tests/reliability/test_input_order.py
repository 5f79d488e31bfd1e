"""Per-user order across the two input topics, on a real broker and real workers.

A report handled before its user's join (the topics are consumed independently) is held, not
refused; the released sum (epsilon 1e6: exact) must count every report once. The truth is the
test's own: per user, the value of the report with the newest ts among those sent.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from stream_app.demo.broker import EmbeddedBroker
from stream_app.kafka.partitioning import partition_for
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    REPO,
    Topics,
    Worker,
    laplace_bound,
    membership,
    new_topics,
    read_json,
    report,
    users_changelog,
    wait_counted,
    wait_ready,
    wait_until,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240),
              pytest.mark.xdist_group("test_input_order")]

GRID = 1024  # units per 1.0 (grid 2**-10)


def settle_on(bootstrap: str, topics: Topics, expected: float, workers: list[Worker],
              timeout: float = 90.0) -> None:
    """Wait until 3 releases in a row show `expected` (exact with epsilon 1e6)."""

    def settled() -> bool:
        recs = read_json(bootstrap, topics.releases, timeout=1.0)[-3:]
        return len(recs) == 3 and all(
            abs(r["noisy_sum"] - expected) <= laplace_bound(r["theta"]) for r in recs)

    wait_until(settled, timeout, f"releases showing the exact sum {expected}", 1.0, workers[0])


def truth(events: list[dict[str, Any]]) -> float:
    """Sum over users who joined of the value of their newest-ts report."""
    newest: dict[str, tuple[float, float]] = {}
    joined = {e["user_id"] for e in events if e.get("event") == "join"}
    for e in events:
        if "value" in e and (e["user_id"] not in newest or e["ts"] >= newest[e["user_id"]][0]):
            newest[e["user_id"]] = (e["ts"], e["value"])
    return sum(v for u, (_, v) in newest.items() if u in joined)


def start(broker: EmbeddedBroker, topics: Topics, tmp_path: Path, n: int = 1, name: str = "w",
          **extra: str) -> list[Worker]:
    env = worker_env(broker.url, topics, tmp_path / "data", {**EXACT_SUM_SETTINGS, **extra})
    workers = [Worker({**env, **({} if i == 0 else _fresh(env))}, tmp_path, f"{name}{i}").start()
               for i in range(n)]
    for w in workers:
        wait_ready(w)
    return workers


def _fresh(env: dict[str, str]) -> dict[str, str]:
    from tests.reliability.harness import fresh_ports
    return {**fresh_ports(env), "PUFFERFISH_DATA_DIR": env["PUFFERFISH_DATA_DIR"] + "-b"}


def dead_letters(bootstrap: str, topics: Topics) -> list[dict[str, Any]]:
    return read_json(bootstrap, topics.deadletter, timeout=1.0)


@pytest.mark.slow
@pytest.mark.parametrize(("n_workers", "one_topic"), [(1, False), (2, False), (2, True)],
                         ids=["1-worker", "2-workers", "2-workers-one-topic"])
def test_one_file_joins_then_reports_through_send(broker_module: EmbeddedBroker,
                                                  tmp_path: Path, n_workers: int,
                                                  one_topic: bool) -> None:
    """The README's events.jsonl, scaled: 80 joins then 400 reports in one file (also with
    both kinds on one topic, the layout the README recommends)."""
    broker, topics = broker_module, new_topics(broker_module.bootstrap, 4)
    rng = random.Random(n_workers)
    users = [f"readme-{i}" for i in range(80)]
    events: list[dict[str, Any]] = [{"user_id": u, "event": "join", "ts": 1000.0}
                                    for u in users]
    events += [{"user_id": rng.choice(users), "value": float(rng.randrange(4)),
                "report_id": f"r{k}", "ts": 1001.0 + k} for k in range(400)]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    layout = {"PUFFERFISH_TOPIC_MEMBERSHIP": topics.reports} if one_topic else {}
    workers = start(broker, topics, tmp_path, n_workers, **layout)
    try:
        env = worker_env(broker.url, topics, tmp_path / "send", {**EXACT_SUM_SETTINGS, **layout})
        sent = subprocess.run([sys.executable, "-m", "stream_app", "send", str(path)], env=env,
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        assert sent.returncode == 0, sent.stderr
        # before the sum: with seed 2, 397 of the 400 reports applied in the order sent already
        # give the final 126, and the dead letters below would be read too early
        wait_counted(broker.bootstrap, topics, sum("value" in e for e in events), workers[0])
        settle_on(broker.bootstrap, topics, truth(events), workers)
        assert dead_letters(broker.bootstrap, topics) == []
    finally:
        for w in workers:
            w.stop()


@pytest.mark.slow
def test_two_confluent_producers_with_skewed_clocks(broker_module: EmbeddedBroker,
                                                    tmp_path: Path) -> None:
    """murmur2_random, joins and reports interleaved at random over two producers whose
    clocks differ by 2 s: a report may be produced (by the other producer) before the join."""
    broker, topics = broker_module, new_topics(broker_module.bootstrap, 4)
    rng = random.Random(11)
    users = [f"skew-{i}" for i in range(60)]
    producers = [Producer({"bootstrap.servers": broker.bootstrap,
                           "partitioner": "murmur2_random", "linger.ms": 5}) for _ in range(2)]
    skew = [0.0, -2.0]
    workers = start(broker, topics, tmp_path)
    events: list[dict[str, Any]] = []
    try:
        pending = {u: 3 for u in users}
        joined: set[str] = set()
        while pending:
            u = rng.choice(sorted(pending))
            p = rng.randrange(2)
            if u not in joined and rng.random() < 0.5:
                ev: dict[str, Any] = {"user_id": u, "event": "join", "ts": time.time() + skew[p]}
                joined.add(u)
                topic = topics.membership
            else:
                ev = {"user_id": u, "value": float(rng.randrange(4)),
                      "report_id": f"{u}-{pending[u]}", "ts": time.time() + skew[p]}
                pending[u] -= 1
                if not pending[u]:
                    del pending[u]
                topic = topics.reports
            events.append(ev)
            producers[p].produce(topic, json.dumps(ev).encode(), key=u.encode())
        for u in sorted(set(users) - joined):
            ev = {"user_id": u, "event": "join", "ts": time.time()}
            events.append(ev)
            producers[0].produce(topics.membership, json.dumps(ev).encode(), key=u.encode())
        for producer in producers:
            assert producer.flush(30) == 0
        wait_counted(broker.bootstrap, topics, sum("value" in e for e in events), workers[0])
        settle_on(broker.bootstrap, topics, truth(events), workers)
        assert [d for d in dead_letters(broker.bootstrap, topics)
                if d["reason"] == "not_present"] == []
    finally:
        workers[0].stop()


@pytest.mark.slow
def test_reports_5_s_before_the_join_then_a_user_who_never_joins(
        broker_module: EmbeddedBroker, tmp_path: Path) -> None:
    broker, topics = broker_module, new_topics(broker_module.bootstrap, 2)
    workers = start(broker, topics, tmp_path, PUFFERFISH_JOIN_GRACE_SECONDS="15")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    offsets: dict[str, tuple[int, int]] = {}

    def note(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets[json.loads(msg.value())["report_id"]] = (msg.partition(), msg.offset())

    users = [f"early-{i}" for i in range(20)]
    events: list[dict[str, Any]] = []
    try:
        for i, u in enumerate(users + ["ghost"]):
            ev = {"user_id": u, "value": float(i % 4), "report_id": f"{u}-1", "ts": time.time()}
            events.append(ev)
            producer.produce(topics.reports, json.dumps(ev).encode(), key=u.encode(),
                             on_delivery=note)
        assert producer.flush(30) == 0
        time.sleep(5.0)  # the joins are produced 5 s after the reports
        for u in users:
            ev = {"user_id": u, "event": "join", "ts": time.time()}
            events.append(ev)
            producer.produce(topics.membership, json.dumps(ev).encode(), key=u.encode())
        assert producer.flush(30) == 0
        settle_on(broker.bootstrap, topics, truth(events), workers)
        wait_until(lambda: dead_letters(broker.bootstrap, topics), 60,
                   "the ghost's dead letter after join_grace_seconds", 1.0, workers[0])
        (letter,) = dead_letters(broker.bootstrap, topics)
        assert letter["reason"] == "not_present" and letter["source_topic"] == topics.reports
        assert (letter["partition"], letter["offset"]) == offsets["ghost-1"]
        assert letter["partition"] == partition_for(b"ghost", 2)
        assert "join_grace_seconds=15" in letter["detail"]
        assert letter["raw"] is None  # the default: partition and offset locate it
    finally:
        workers[0].stop()


@pytest.mark.slow
def test_sigkill_while_reports_are_held_then_a_long_replay(broker_module: EmbeddedBroker,
                                                          tmp_path: Path) -> None:
    """Reports held (no join yet), SIGKILL, restart: none lost, none counted twice. Then one
    user's 1,000 reports inside the replayed span of a second SIGKILL (no offset committed
    since the start: the whole log is replayed): the user's histogram equals the truth."""
    broker, topics = broker_module, new_topics(broker_module.bootstrap, 2)
    # no periodic commit: a SIGKILL replays everything since the worker started
    extra = {"PUFFERFISH_JOIN_GRACE_SECONDS": "600",
             "PUFFERFISH_BROKER_COMMIT_INTERVAL_SECONDS": "3600"}
    users = [f"held-{i}" for i in range(20)]
    rng = random.Random(5)
    values = {u: float(rng.randrange(4)) for u in users}
    (w1,) = start(broker, topics, tmp_path, **extra)
    try:
        produce([(topics.reports, u, report(u, values[u], f"{u}-1", ts=100.0)) for u in users],
                broker.bootstrap)
        wait_until(lambda: w1.metric("pufferfish_reports_held") == len(users), 60,
                   "20 reports held", 0.5, w1)
        wait_until(lambda: len(held_in_changelog(broker.bootstrap, topics)) == len(users), 30,
                   "the held reports in the changelog", 0.5, w1)
    finally:
        w1.kill9()
    (w2,) = start(broker, topics, tmp_path, name="restarted", **extra)
    try:
        produce([(topics.membership, u, membership(u, "join", 50.0)) for u in users],
                broker.bootstrap)
        # No state short of the last join shows this sum (each partition's last join brings a
        # 3), but a release shows a batch before its changelog records are written: the
        # changelog read below waits for the changelog to count the 20 held reports.
        wait_counted(broker.bootstrap, topics, len(users), w2)
        settle_on(broker.bootstrap, topics, sum(values.values()), [w2])
        states = changelog(broker.bootstrap, topics)
        assert all(sum(states[u]["counts"]) == 1 and not states[u].get("held") for u in users)

        long = [float(rng.randrange(4)) for _ in range(1000)]
        produce([(topics.reports, users[0], report(users[0], v, f"long-{k}", ts=200.0 + k))
                 for k, v in enumerate(long)], broker.bootstrap)
        domain = json.loads(w2.env.get("PUFFERFISH_DOMAIN", "[0, 1, 2, 3, 4, 5]"))
        want = [long.count(float(v)) + (values[users[0]] == v) for v in domain]
        seen: list[Any] = []

        def counted() -> bool:
            seen[:] = changelog(broker.bootstrap, topics)[users[0]]["counts"]
            return seen == want

        try:
            wait_until(counted, 60, "the 1,000 reports in the user's histogram", 0.5, w2)
        except AssertionError as exc:
            raise AssertionError(f"histogram {seen}, want {want}") from exc
    finally:
        w2.kill9()
    (w3,) = start(broker, topics, tmp_path, name="replaying", **extra)
    try:
        expected = sum(values.values()) - values[users[0]] + long[-1]
        settle_on(broker.bootstrap, topics, expected, [w3])
        wait_until(lambda: (w3.metric("pufferfish_events_ignored_total",
                                      {"reason": "replayed"}) or 0) >= 1000, 60,
                   "the replay recognised", 0.5, w3)
        assert changelog(broker.bootstrap, topics)[users[0]]["counts"] == want
        assert dead_letters(broker.bootstrap, topics) == []
    finally:
        w3.stop()


def produce(items: list[tuple[str, str, bytes]], bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for topic, user, value in items:
        producer.produce(topic, value, key=user.encode())
    assert producer.flush(30) == 0


def changelog(bootstrap: str, topics: Topics) -> dict[str, dict[str, Any]]:
    return users_changelog(bootstrap, topics.app_id)


def held_in_changelog(bootstrap: str, topics: Topics) -> list[str]:
    return [u for u, st in users_changelog(bootstrap, topics.app_id, to_end=False).items()
            if st.get("held")]
