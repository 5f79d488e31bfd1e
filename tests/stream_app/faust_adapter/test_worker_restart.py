"""Restart durability: SIGTERM and SIGKILL mid-stream; state, budget and seqs survive."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest

from stream_app.demo.broker import EmbeddedBroker
from tests.kafka_helpers import PacedProducer, Record, consume_all, json_values, read_to_end
from tests.stream_app.worker_proc import (
    Reference,
    barrier,
    handled,
    input_env,
    noise_bound,
    send,
    start_worker,
    wait_handled,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

DOMAIN = (0.0, 1.0, 2.0, 3.0)
PAIRS = ("distribution_presence",)
BUDGET = 10_000.0
PARTS = 2


def all_releases(bootstrap: str, at_least: int = 0) -> list[dict]:
    """Releases in log order (one partition); with `at_least`, wait (bounded) for that many:
    a timed read alone can stop short under load."""
    if at_least:
        recs = asyncio.run(consume_all(bootstrap, "releases", timeout=60, min_count=at_least))
        assert len(recs) >= at_least, f"timed out after 60 s waiting for {at_least} releases"
        return json_values(recs)
    return json_values(asyncio.run(consume_all(bootstrap, "releases", timeout=1.0)))


def check_consistent(bootstrap: str, ref: Reference, since: float) -> list[dict]:
    """Releases after `since` carry the reference theta and a sum near the reference X."""

    def fresh() -> list[dict]:
        return [r for r in all_releases(bootstrap) if r["ts"] > since]

    wait_for(lambda: len(fresh()) >= 3, 60, "3 releases after the drain")
    got = fresh()
    theta, x = ref.theta(), ref.x()
    for r in got:
        assert r["theta"] == pytest.approx(theta, rel=1e-12), (r, theta)
        assert abs(r["noisy_sum"] - x) <= noise_bound(theta, len(got)), (r, x)
    return got


def check_journal(records: list[dict]) -> None:
    """No seq with two different values; budget never decreases; seqs increase in log order."""
    by_seq: dict[int, set] = defaultdict(set)
    for r in records:
        by_seq[r["seq"]].add((r["noisy_sum"], r["theta"], r["epsilon_spent"]))
    assert all(len(v) == 1 for v in by_seq.values()), "a seq was published with two values"
    seqs = [r["seq"] for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    spent = [r["epsilon_spent"] for r in records]
    assert all(b > a for a, b in zip(spent, spent[1:], strict=False)), spent
    for r in records:
        assert r["epsilon_spent"] + r["epsilon_remaining"] == pytest.approx(BUDGET)


@pytest.mark.slow
def test_restart_sigterm_then_sigkill(broker: EmbeddedBroker, tmp_path: Path) -> None:
    env = input_env(
        broker, tmp_path, PARTS, app_id="restart", domain=list(DOMAIN),
        pairs=list(PAIRS), budget_total=str(BUDGET), release_period_seconds="0.5",
    )
    ref = Reference(DOMAIN, PAIRS, 1.0)
    rng = random.Random(5)
    users = [f"u{i}" for i in range(10)]
    sent: list[tuple[str, dict]] = []

    def reports(tag: str, k: int) -> list[tuple[str, dict]]:
        out = []
        for j in range(k):
            u = rng.choice([u for u in users if ref.users[u].present])
            out.append((u, ref.report(u, rng.choice(DOMAIN), f"{tag}-{j}")))
        sent.extend(out)
        return out

    worker = start_worker(env, tmp_path, "w1")
    try:
        send(broker.bootstrap, "membership", [(u, ref.join(u)) for u in users])
        barrier(broker.bootstrap, PARTS, "joined")
        send(broker.bootstrap, "reports", reports("a", 60))
        barrier(broker.bootstrap, PARTS, "a")
        check_consistent(broker.bootstrap, ref, time.time() + 1.0)

        assert worker.stop(signal.SIGTERM) == 0, worker.log()
        before = json_values(asyncio.run(read_to_end(broker.bootstrap, "releases")))  # no writer
        worker = start_worker(env, tmp_path, "w2")
        # users joined before the restart are still present; old report ids are still known
        send(broker.bootstrap, "reports", reports("b", 40) + sent[:5])
        barrier(broker.bootstrap, PARTS, "b")  # the two topics are not ordered w.r.t. each other
        send(broker.bootstrap, "membership", [(u, ref.leave(u)) for u in users[:2]])
        barrier(broker.bootstrap, PARTS, "b2")
        check_consistent(broker.bootstrap, ref, time.time() + 1.0)
        after = all_releases(broker.bootstrap, at_least=len(before) + 1)
        assert after[: len(before)] == before
        assert after[len(before)]["seq"] == before[-1]["seq"] + 1
        assert after[len(before)]["epsilon_spent"] > before[-1]["epsilon_spent"]

        # SIGKILL mid-stream: reports keep arriving while the worker is killed (some handled,
        # the last chunks held back until after the kill), whatever the worker's speed
        feed: list[Record] = [("reports", u.encode(), json.dumps(v).encode())
                              for u, v in reports("c", 40)]
        chunks = [feed[i:i + 5] for i in range(0, len(feed), 5)]
        start = handled([worker])
        with PacedProducer(broker.bootstrap, chunks, hold=2, pace=0.1) as producer:
            wait_handled([worker], start + 5)
            at_kill = handled([worker])
            worker.stop(signal.SIGKILL)
            producer.release()
        assert start + 5 <= at_kill < start + len(feed), (start, at_kill)
        before = json_values(asyncio.run(read_to_end(broker.bootstrap, "releases")))  # no writer
        worker = start_worker(env, tmp_path, "w3")
        send(broker.bootstrap, "reports", reports("d", 20) + sent[10:15])
        barrier(broker.bootstrap, PARTS, "d", timeout=90)
        send(broker.bootstrap, "membership", [(users[0], ref.join(users[0]))])
        barrier(broker.bootstrap, PARTS, "d2")
        check_consistent(broker.bootstrap, ref, time.time() + 1.0)
        after = all_releases(broker.bootstrap, at_least=len(before) + 1)
        assert after[: len(before)] == before
        check_journal(after)
        assert worker.alive()
    finally:
        rc = worker.stop()
    assert rc == 0, worker.log()
