"""A backlog written in Kafka transactions against the same backlog written plainly, on noida-db
(tansu has no transactions through these clients): issue 34, "gaps at plain cost".

Each round produces, while no worker runs, 50 joins (acknowledged) and then N reports for
those users on fresh topics: plainly (one producer, batched), or in transactions of 10 (a
confluent-kafka transactional producer: every commit marker takes an offset, so the consumer
sees a gap after every 10 records). A worker (bench/worker_pipeline.py) is then started and
timed to the moment its counters show every event handled — from its process start, and from
the moment it serves its metrics ("ready"; what the issue's table measured). Rounds alternate
plain, transactional, plain, ... (``--passes`` of each) so a slow minute of the shared machine
falls on both; the figure is the ratio of the means, transactional / plain. Goal: <= 2.
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from statistics import mean
from typing import Any

from bench import _common
from bench.harness import DOMAIN, PARTITIONS, loadavg, topic_names, wait_for
from bench.producing import produce_waiting
from bench.worker_pipeline import start_worker
from stream_app.demo.broker_admin import create_topics
from tests.noida_broker import NoidaBroker

NAME = "backlog"
USERS = 50
PER_TRANSACTION = 10


def events(n: int, seed: int) -> tuple[list[str], list[tuple[str, bytes]]]:
    rng = random.Random(seed)
    users = [f"b{i:03d}" for i in range(USERS)]
    ts = time.time()
    reports = [(u, json.dumps({"user_id": u, "value": rng.choice(DOMAIN), "report_id": f"r{k}",
                               "ts": ts + k * 1e-3}).encode())
               for k in range(n) for u in [users[k % USERS]]]
    return users, reports


def produce(bootstrap: str, topics: dict[str, str], users: list[str],
            reports: list[tuple[str, bytes]], transactional: bool) -> None:
    from confluent_kafka import Producer

    base = {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"}
    joins = Producer(base)
    for u in users:
        joins.produce(topics["membership"], json.dumps(
            {"user_id": u, "event": "join", "ts": time.time()}).encode(), key=u.encode())
    if joins.flush(30):
        raise RuntimeError("joins not acknowledged")
    if not transactional:
        producer = Producer({**base, "linger.ms": 20})
        for u, value in reports:
            produce_waiting(producer, topics["reports"], u, value)
    else:
        producer = Producer({**base, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
        producer.init_transactions(30)
        for start in range(0, len(reports), PER_TRANSACTION):
            producer.begin_transaction()
            for u, value in reports[start:start + PER_TRANSACTION]:
                produce_waiting(producer, topics["reports"], u, value)
            producer.commit_transaction(30)
    if producer.flush(60):
        raise RuntimeError("reports not acknowledged")


def one_round(broker: Any, workdir: Path, n: int, transactional: bool, seed: int
              ) -> tuple[float, float]:
    """(seconds from process start, seconds from ready) to every event handled."""
    tag = f"{'tx' if transactional else 'plain'}{uuid.uuid4().hex[:6]}"
    topics = topic_names(tag)
    asyncio.run(create_topics(broker.bootstrap, {
        name: PARTITIONS if kind in ("reports", "membership") else 1
        for kind, name in topics.items()}))
    users, reports = events(n, seed)
    produce(broker.bootstrap, topics, users, reports, transactional)
    started = time.monotonic()
    worker = start_worker(broker, workdir, tag)  # returns once it serves its metrics
    ready = time.monotonic()
    try:
        wait_for(worker, len(users) + len(reports), 600, f"{tag}: every event handled")
        done = time.monotonic()
    finally:
        worker.stop()
    return done - started, done - ready


def main(argv: Sequence[str] | None = None) -> int:
    p = _common.parser(NAME, __doc__.splitlines()[0] if __doc__ else NAME)
    p.add_argument("--transactions", type=int, default=1_000)
    p.add_argument("--passes", type=int, default=2)
    args = p.parse_args(argv)
    transactions = 100 if args.quick else args.transactions
    n = transactions * PER_TRANSACTION
    load_before = loadavg()
    results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="bench-backlog-") as tmp:
        workdir = Path(tmp)
        broker = NoidaBroker(workdir / "noida", workdir / "noida.log").start()
        try:
            for k in range(args.passes):
                for transactional in (False, True):
                    got = one_round(broker, workdir, n, transactional, seed=k)
                    results[transactional].append(got)
                    print(f"{'transactional' if transactional else 'plain':>13} pass {k + 1}: "
                          f"{got[0]:.2f} s from start, {got[1]:.2f} s from ready", flush=True)
        finally:
            broker.stop()
    load_after = loadavg()
    rows = []
    for transactional in (False, True):
        runs = results[transactional]
        rows.append([f"{n:,} reports, " + (f"{transactions:,} transactions x {PER_TRANSACTION}"
                                           if transactional else "plain"),
                     " / ".join(f"{s:.2f}" for s, _ in runs), f"{mean(s for s, _ in runs):.2f}",
                     " / ".join(f"{r:.2f}" for _, r in runs), f"{mean(r for _, r in runs):.2f}"])
    ratio_start = mean(s for s, _ in results[True]) / mean(s for s, _ in results[False])
    ratio_ready = mean(r for _, r in results[True]) / mean(r for _, r in results[False])
    headers = ["backlog (noida-db, 50 users, 4 partitions)", "start -> all (s), passes",
               "mean", "ready -> all (s), passes", "mean"]
    print(_common.text_table(headers, rows))
    verdict = "met" if ratio_ready <= 2.0 else "NOT met"
    summary = (f"transactional / plain: {ratio_start:.2f}x from start, {ratio_ready:.2f}x from "
               f"ready (goal <= 2x: {verdict}); load before {load_before}, after {load_after}")
    print(summary)
    body = _common.markdown_table(headers, rows) + "\n\n" + summary + "\n"
    _common.report(args, NAME, "9. Backlog: transactional vs plain (issue 34)",
                   _common.command_line(NAME, argv), body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
