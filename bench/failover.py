"""Failover with standby replicas (``python -m bench recovery --failover N``): on tansu
(``producer_max_batch_size=1``), or on Apache Kafka (``--brokers kafka``: Kafka's producer and
fetch defaults, the session timeout at its 6 s minimum); noida-db 0.2.3's group never settled
with two members here (OffsetCommit "IllegalGeneration", a member rejoining for good: its known
defect, ../shared/kafka.md), ``--brokers noida`` tries it anyway. Two workers on
RocksDB with ``table_standby_replicas = 1`` share N users (one report each, 4 partitions); once
the users changelog holds one record per user (the input is durable: a kill earlier makes the
survivor replay input, at-least-once, and its first releases count fewer users) and a release
has the exact sum, the one that owns the release partition is SIGKILLed. Measured: kill -> the
survivor's next release, and whether its releases' sums are exact (epsilon = 1e6: theta =
max|domain| / 1e6, the noise on the 2**-10 grid is 0 except with probability ~e^-200, so
noisy_sum must equal the sum of the values the bench sent, computed here). The split, from the
survivor's log (time since the kill of its first line of each): *rebalance seen* (its heartbeat
answered "rebalancing": the broker's session timeout, 6 s here, plus up to one heartbeat
interval, 1 s), *group joined* (tansu holds a JoinGroup for half the session timeout, 3 s; a real
Kafka answers once every live member has joined), *worker ready* (Faust's recovery: the standby
tail), *journals read from* and *journals read* (the new release owner reads both journals at
once; ``journal_quiet_seconds`` = 1 s of quiet after their ends). ``--set KEY=VALUE``: worker
settings over these.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import _common
from bench.harness import PARTITIONS, loadavg, start_pipeline
from bench.markers import read_releases
from bench.recovery_setup import Broker, produce_users, run_settings, run_topics, tear_down
from stream_app.metrics_page import totals

NAME = "recovery-failover"
EXACT = {"epsilon": "1000000", "store": "rocksdb://", "table_standby_replicas": "1"}
HEADERS = ("broker", "users", "workers", "load s", "kill -> survivor's release s",
           "release sum exact", "survivor's releases after the kill",
           *(f"-> {step} s" for step in ("rebalance seen", "group joined", "worker ready",
                                          "journals read from", "journals read")))
# The survivor's log lines that split the takeover (their time since the kill, s)
STEPS = ("because it is rebalancing", "Joined group", "Worker ready",
         "reading the releases and priors journals", "journals restored")
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def split(log: str, killed_at: float) -> list[float]:
    """Seconds from the kill to the first line of each step after it (NaN: not logged)."""
    out = []
    for step in STEPS:
        found = float("nan")
        for line in log.splitlines():
            m = STAMP.match(line)
            if m and step in line:
                at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if at >= killed_at:
                    found = at - killed_at
                    break
        out.append(found)
    return out


def releases_total(worker: Any) -> float:
    return totals(worker.samples(("pufferfish_releases_total",))).get(
        "pufferfish_releases_total", 0.0)


def durable(bootstrap: str, changelog: str, n: int, deadline: float) -> None:
    """Waits until the users changelog holds n records (one per user): the workers' input
    offsets are committed only after that (design.md, "write window"). Handled is not enough:
    a worker that applied its input may still be sending its changelog (one record per produce
    request on tansu), and a kill then makes the survivor replay that input (at-least-once),
    its first releases counting the replayed users again only as it goes."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    try:
        while sum(consumer.get_watermark_offsets(TopicPartition(changelog, p), timeout=10)[1]
                  for p in range(PARTITIONS)) < n:
            if time.monotonic() > deadline:
                raise RuntimeError("the users changelog did not reach one record per user")
            time.sleep(1.0)
    finally:
        consumer.close()


def measure(kind: str, n: int, timeout: float, keep: Path | None = None,
            extra: dict[str, str] | None = None) -> list[object]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    broker = Broker(kind, workdir)
    tag = f"fo{uuid.uuid4().hex[:6]}"
    topic, outputs = run_topics(tag)
    workers: list[Any] = []
    try:
        settings = run_settings(kind, broker.bootstrap, topic, outputs, **EXACT, **(extra or {}))
        workers = [start_pipeline(broker.impl, workdir, tag, ("-m", "stream_app", "run"),
                                  index=i, **settings) for i in range(2)]
        t0 = time.monotonic()
        expected = produce_users(broker.bootstrap, topic, 0, n, seed=n)
        deadline = t0 + timeout
        while sum(w.handled() for w in workers) < n:
            for w in workers:
                w.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError("the load was not handled in time")
            time.sleep(0.5)
        load = time.monotonic() - t0

        def exact(rec: dict[str, Any]) -> bool:
            return bool(abs(rec["noisy_sum"] - expected) <= 1e-6 * max(1, expected))

        durable(broker.bootstrap, f"bench-{tag}-users-changelog", n, deadline)
        while not (recs := asyncio.run(read_releases(broker.bootstrap, outputs["releases"]))) \
                or not exact(recs[-1]):
            if time.monotonic() > deadline:
                raise RuntimeError("no release of the exact sum before the kill")
            time.sleep(1.0)
        before = [releases_total(w) for w in workers]
        time.sleep(2.5)  # 2.5 release periods: the owner's counter moves, the other's does not
        moved = [w for w, b in zip(workers, before, strict=True) if releases_total(w) > b]
        if len(moved) != 1:
            raise RuntimeError(f"no single release owner ({len(moved)} moved)")
        victim = moved[0]
        survivor = workers[1] if victim is workers[0] else workers[0]
        last_seq = max(r["seq"] for r in asyncio.run(
            read_releases(broker.bootstrap, outputs["releases"])))
        base = releases_total(survivor)
        killed, killed_at = time.monotonic(), time.time()
        os.kill(victim.proc.pid, signal.SIGKILL)
        print(f"  SIGKILL at {time.strftime('%H:%M:%S', time.gmtime())}"
              f".{int(time.time() % 1 * 1000):03d} UTC: {victim.log_path.name}", flush=True)
        victim.proc.wait(timeout=10)
        while releases_total(survivor) <= base:
            survivor.check_alive()
            if time.monotonic() - killed > timeout:
                raise RuntimeError("the survivor did not release")
            time.sleep(0.1)
        took = time.monotonic() - killed
        time.sleep(3.0)  # a few more of its releases, to check them all
        after = [r for r in asyncio.run(read_releases(broker.bootstrap, outputs["releases"]))
                 if r["seq"] > last_seq]
        steps = split(survivor.log_path.read_text(errors="replace"), killed_at)
        return [kind, n, 2, load, took, all(exact(r) for r in after) and bool(after),
                len(after), *steps]
    finally:
        for w in workers:
            w.stop(timeout=60)
        tear_down(broker, workdir, keep, f"failover-{kind}-{n}")


def run(args: argparse.Namespace, argv: Sequence[str] | None, n: int) -> int:
    load_before = loadavg()
    kind = "tansu" if "tansu" in args.brokers else args.brokers[0]
    extra = dict(kv.split("=", 1) for kv in args.set)
    row = measure(kind, 500 if args.quick else n, args.timeout, args.keep_logs, extra)
    print(_common.text_table(HEADERS, [row]))
    body = (f"{(__doc__ or '').strip()}\n\nLoad average (1, 5, 15 min): before {load_before}, "
            f"after {loadavg()}; os.cpu_count() {os.cpu_count()}.\n\n"
            f"{_common.markdown_table(HEADERS, [row])}\n\n<!-- row: {json.dumps(row)} -->")
    _common.report(args, NAME, "Failover with standby replicas (two workers, one SIGKILLed)",
                   _common.command_line("recovery", argv), body)
    return 0
