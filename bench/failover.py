"""Failover with standby replicas (``python -m bench recovery --failover N``): on tansu
(``producer_max_batch_size=1``); noida-db 0.2.3's group never settled with two members here
(OffsetCommit "IllegalGeneration", a member rejoining for good: its known defect,
../shared/kafka.md), ``--brokers noida`` tries it anyway. Two workers on
RocksDB with ``table_standby_replicas = 1`` share N users (one report each, 4 partitions); the
one that owns the release partition is SIGKILLed. Measured: kill -> the survivor's next release
(it includes the broker's session timeout, 6 s here: when the group learns of the death), and
whether that release's sum is exact (epsilon = 1e6: theta = max|domain| / 1e6, the noise on the
2**-10 grid is 0 except with probability ~e^-200, so noisy_sum must equal the sum of the values
the bench sent, computed here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import _common
from bench.harness import PARTITIONS, loadavg, start_pipeline
from bench.markers import read_releases
from bench.recovery import SETTINGS, TANSU_EXACT, Broker, produce_users
from stream_app.demo.broker_admin import create_topics
from stream_app.metrics_page import totals

NAME = "recovery-failover"
EXACT = {"epsilon": "1000000", "store": "rocksdb://", "table_standby_replicas": "1"}
HEADERS = ("broker", "users", "workers", "load s", "kill -> survivor's release s",
           "release sum exact", "survivor's releases after the kill")


def releases_total(worker: Any) -> float:
    return totals(worker.samples(("pufferfish_releases_total",))).get(
        "pufferfish_releases_total", 0.0)


def measure(kind: str, n: int, timeout: float) -> list[object]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    broker = Broker(kind, workdir)
    tag = f"fo{uuid.uuid4().hex[:6]}"
    topic = f"input-{tag}"
    outputs = {k: f"{k}-{tag}" for k in ("releases", "partials", "deadletter", "priors")}
    workers: list[Any] = []
    try:
        asyncio.run(create_topics(broker.bootstrap, {
            topic: PARTITIONS, **{name: 1 for name in outputs.values()}}))
        settings: dict[str, Any] = {
            **SETTINGS, **EXACT, "topic_reports": topic, "topic_membership": topic,
            **{f"topic_{k}": v for k, v in outputs.items()},
            **(TANSU_EXACT if kind == "tansu" else {})}
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
        killed = time.monotonic()
        os.kill(victim.proc.pid, signal.SIGKILL)
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
        return [kind, n, 2, load, took, all(exact(r) for r in after) and bool(after),
                len(after)]
    finally:
        for w in workers:
            w.stop(timeout=60)
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run(args: argparse.Namespace, argv: Sequence[str] | None, n: int) -> int:
    load_before = loadavg()
    kind = "tansu" if "tansu" in args.brokers else args.brokers[0]
    row = measure(kind, 500 if args.quick else n, args.timeout)
    print(_common.text_table(HEADERS, [row]))
    body = (f"{(__doc__ or '').strip()}\n\nLoad average (1, 5, 15 min): before {load_before}, "
            f"after {loadavg()}; os.cpu_count() {os.cpu_count()}.\n\n"
            f"{_common.markdown_table(HEADERS, [row])}\n\n<!-- row: {json.dumps(row)} -->")
    _common.report(args, NAME, "Failover with standby replicas (two workers, one SIGKILLed)",
                   _common.command_line("recovery", argv), body)
    return 0
