"""Chaos on Apache Kafka (issue 46): three workers on eight input partitions under a steady
load, and for ``--minutes`` a seeded random sequence of faults: SIGKILL (restarted after a
moment), SIGTERM (restarted), SIGSTOP past the session timeout (then SIGCONT), the release owner
frozen at its release intent (tests/reliability/freezer.py: between its journal fence and its
send) past the session timeout, and rolling restarts. Then the load stops, every worker runs
again, and the run waits for the releases to settle. Checked, over both views of the journals
(committed records, and everything in the log): no tick and no seq published twice, no tree
node drawn twice, ``epsilon_spent`` never below the charges published (the budget spent is the
journals' charges, plus any charge burned by a fenced owner), and the final releases' exact sums
equal a replay of the input (the newest report of every user).

Scenarios ``<store>-<mechanism>``: the memory store or RocksDB with one standby replica;
independent releases at epsilon 1e6 (noise 0: a release is its exact sum) or tree releases (the
exact sum is the noisy sum minus its nodes' journaled noise). By default ``memory-independent``
and ``rocksdb-tree``. ``--quick``: 35 s of faults (tests/reliability/test_chaos.py runs
``memory-tree`` so, the CI short form).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from bench import _common
from tests.kafka_broker import KafkaBroker
from tests.release_views import VIEWS, read_view, short_of_charges, twice
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    Cluster,
    Worker,
    membership,
    new_topics,
    produce_raw,
)
from tests.reliability.test_split_brain import FENCED, Freezer
from tests.waiting import wait_for

NAME = "chaos"
PARTITIONS, WORKERS, USERS, GRID = 8, ("a", "b", "c"), 120, 1024
DOMAIN = (0, 1, 2, 3, 4, 5)
PERIOD, WINDOW, TREE_BUDGET, W = 0.5, 10.0, 5.0, 2
ACTIONS = ("kill", "term", "stop", "freeze_owner", "roll")
QUICK_SECONDS = 35.0  # the CI short form's faults
HEADERS = ("scenario", "store", "mechanism", "chaos s", "faults", "reports", "releases in the log",
           "committed", "ticks twice", "seqs twice", "nodes twice", "short of charges",
           "burned charges", "fenced", "final sums exact")


@dataclass(frozen=True)
class Scenario:
    name: str
    store: str
    mechanism: str

    def settings(self, nodes_topic: str) -> dict[str, str]:
        common = {"PUFFERFISH_STORE": self.store, "PUFFERFISH_LOG_LEVEL": "info",
                  "PUFFERFISH_RELEASE_PERIOD_SECONDS": str(PERIOD)}
        if self.store == "rocksdb://":
            common["PUFFERFISH_TABLE_STANDBY_REPLICAS"] = "1"
        if self.mechanism == "independent":
            return {**EXACT_SUM_SETTINGS, **common}
        return {**common, "PUFFERFISH_RELEASE_MECHANISM": "tree",
                "PUFFERFISH_BUDGET_WINDOW_SECONDS": str(WINDOW),
                "PUFFERFISH_BUDGET_TOTAL": str(TREE_BUDGET),
                "PUFFERFISH_MAX_CHANGES_PER_WINDOW": str(W),
                "PUFFERFISH_TOPIC_TREE_NODES": nodes_topic}


SCENARIOS = {f"{store.rstrip(':/')}-{mechanism}": Scenario(f"{store.rstrip(':/')}-{mechanism}",
                                                          store, mechanism)
             for store in ("memory://", "rocksdb://") for mechanism in ("independent", "tree")}
DEFAULT = "memory-independent,rocksdb-tree"  # both stores, both mechanisms


class Load:
    """Reports of random values (seeded) at a steady rate, from a thread; the truth is each
    user's newest report (ts strictly increasing: one sender)."""

    def __init__(self, bootstrap: str, topic: str, users: Sequence[str], seed: int,
                 every: float = 0.02) -> None:
        self.bootstrap, self.topic, self.users, self.every = bootstrap, topic, users, every
        self.rng = random.Random(seed)  # test data only; the product's noise never uses this
        self.latest: dict[str, float] = {}
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await producer.start()
        t0 = time.time()
        try:
            while not self.stop.is_set():
                user, value = self.rng.choice(self.users), float(self.rng.choice(DOMAIN))
                ts = t0 + self.sent * 1e-3
                await producer.send_and_wait(self.topic, (
                    f'{{"user_id": "{user}", "value": {value}, "report_id": '
                    f'"{user}-{self.sent}", "ts": {ts}}}').encode(), key=user.encode())
                self.latest[user] = value
                self.sent += 1
                await asyncio.sleep(self.every)
        finally:
            await producer.stop()

    def exact_units(self) -> int:
        return int(sum(self.latest.values()) * GRID)


@dataclass
class Run:
    """The workers by name, restarted by name (same data_dir, fresh ports)."""

    cluster: Cluster
    data: dict[str, Path]
    current: dict[str, Worker] = field(default_factory=dict)
    faults: Counter[str] = field(default_factory=Counter)

    def start(self, name: str) -> Worker:
        self.current[name] = self.cluster.start(name)
        return self.current[name]

    def alive(self) -> list[str]:
        return [n for n, w in self.current.items() if w.alive()]



def fault(run: Run, rng: random.Random, kind: str) -> None:
    for name in sorted(set(run.current) - set(run.alive())):  # exited by itself: back first
        run.start(name)
    name = rng.choice(sorted(run.current))
    worker = run.current[name]
    if kind == "kill":
        worker.kill9()
        time.sleep(rng.uniform(0.5, 3.0))  # the scenario: how long the worker stays dead
        run.start(name)
    elif kind == "term":
        worker.stop()
        run.start(name)
    elif kind == "stop":
        os.killpg(worker.pid, signal.SIGSTOP)
        try:
            time.sleep(rng.uniform(7.0, 10.0))  # the scenario: past the 6 s session timeout
        finally:
            os.killpg(worker.pid, signal.SIGCONT)
    elif kind == "freeze_owner":
        freezer = Freezer(list(run.data.values()), run.cluster.tmp_path)
        try:
            pid = int(freezer.line(30).split(" ")[1])
            try:
                time.sleep(rng.uniform(7.0, 10.0))  # the scenario: past the session timeout
            finally:
                os.killpg(pid, signal.SIGCONT)
        except AssertionError:
            pass  # no intent within 30 s (an outage of the owner): nothing frozen
        finally:
            freezer.close()
    else:  # roll: each worker in turn, stopped and started again
        for name in sorted(run.current):
            run.current[name].stop()
            run.start(name)
    run.faults[kind] += 1


def exact_sums(bootstrap: str, releases_topic: str, nodes_topic: str | None,
               last: int) -> list[tuple[Any, Any, int | None]]:
    """(tick, window, exact sum in grid units) of the newest ``last`` releases in the log: the
    noisy sum minus its noise (tree mode: its nodes' draws in the journal; None when one is
    missing there)."""
    releases = asyncio.run(read_view(bootstrap, releases_topic, "read_uncommitted"))[-last:]
    noise: dict[tuple[int, str], int] = {}
    if nodes_topic is not None:
        nodes = asyncio.run(read_view(bootstrap, nodes_topic, "read_uncommitted"))
        noise = {(n["window"], n["node"]): n["units"] for n in nodes}
    out: list[tuple[Any, Any, int | None]] = []
    for r in releases:
        noisy = round(r["noisy_sum"] * GRID)
        drawn = [noise.get((r["window"], n)) for n in r["nodes"]] if nodes_topic else []
        out.append((r.get("tick"), r.get("window"),
                    None if None in drawn else noisy - sum(d or 0 for d in drawn)))
    return out


def releases_exact(bootstrap: str, releases_topic: str, nodes_topic: str | None,
                   want: int, last: int) -> bool:
    """The newest ``last`` releases in the log add their noise to exactly ``want`` units."""
    sums = exact_sums(bootstrap, releases_topic, nodes_topic, last)
    return len(sums) == last and all(units == want for _, _, units in sums)


def burned(releases: list[dict[str, Any]]) -> float:
    """What the last release of each window (or of the run) shows spent beyond the charges
    published before it: charges burned by a fenced owner (drawn, never in the log)."""
    out = 0.0
    spent: dict[Any, float] = {}
    shown: dict[Any, float] = {}
    for r in releases:
        spent[r.get("window")] = spent.get(r.get("window"), 0.0) + float(r["charge"])
        shown[r.get("window")] = float(r["epsilon_spent"])
    for window, total in spent.items():
        out += max(shown[window] - total, 0.0)
    return out


@dataclass
class Outcome:
    row: list[object]
    duplicates: list[str]  # the release path's checks that failed (ticks, seqs, nodes, budget)
    exact: str | None  # None: the final releases are on the exact sum of the input; else why not


def run_scenario(broker: KafkaBroker, tmp: Path, scenario: Scenario, seconds: float,
                 seed: int, settle_seconds: float = 180.0) -> Outcome:
    """One chaos run."""
    rng = random.Random(seed)
    topics = new_topics(broker.bootstrap, PARTITIONS)
    nodes_topic = f"{topics.prefix}-tree-nodes"
    cluster = Cluster(broker.url, broker.bootstrap, topics, tmp, scenario.settings(nodes_topic),
                      names=WORKERS)
    run = Run(cluster, {n: tmp / f"data-{n}" for n in WORKERS})
    users = [f"{topics.prefix}-u{i}" for i in range(USERS)]
    load = Load(broker.bootstrap, topics.reports, users, seed)
    tree = scenario.mechanism == "tree"
    try:
        for name in WORKERS:
            run.start(name)
        produce_raw(broker.bootstrap, [(topics.membership, u.encode(), membership(u, "join"))
                                       for u in users])
        load.thread.start()
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            fault(run, rng, rng.choice(ACTIONS))
            time.sleep(rng.uniform(1.0, 4.0))  # the scenario: the steady state between faults
        chaos_s = time.monotonic() - started
        load.stop.set()
        load.thread.join(timeout=30)
        for name in WORKERS:
            if not run.current[name].alive():
                run.start(name)
        want = load.exact_units()
        settle = 6 if not tree else int(WINDOW / PERIOD)  # tree: past the next window's roll
        try:
            wait_for(lambda: releases_exact(broker.bootstrap, topics.releases,
                                            nodes_topic if tree else None, want, settle),
                     settle_seconds, "the final releases on the exact sum of the input", 1.0)
            exact = True
        except AssertionError:
            exact = False
    finally:
        load.stop.set()
        for worker in cluster.workers:
            if worker.alive():
                os.killpg(worker.pid, signal.SIGCONT)
        cluster.stop()
    releases = {v: asyncio.run(read_view(broker.bootstrap, topics.releases, v)) for v in VIEWS}
    log = releases["read_uncommitted"]
    nodes = asyncio.run(read_view(broker.bootstrap, nodes_topic, "read_uncommitted")) \
        if tree else []
    drawn = Counter((n["window"], n["node"]) for n in nodes)
    failed = []
    for view, journal in releases.items():
        for what, bad in (("ticks twice", twice(journal, "tick")),
                          ("seqs twice", twice(journal, "seq")),
                          ("epsilon_spent short of the charges", short_of_charges(journal))):
            if bad:
                failed.append(f"{view}: {what} {bad[:5]}")
    nodes_twice = sorted(k for k, c in drawn.items() if c > 1)
    if nodes_twice:
        failed.append(f"nodes drawn twice {nodes_twice[:5]}")
    fenced = sum(w.output().count(FENCED) for w in cluster.workers)
    row: list[object] = [
        scenario.name, scenario.store, scenario.mechanism, round(chaos_s),
        " ".join(f"{k} {run.faults[k]}" for k in ACTIONS if run.faults[k]), load.sent,
        len(log), len(releases["read_committed"]),
        len(twice(log, "tick")), len(twice(log, "seq")), len(nodes_twice),
        len(short_of_charges(log)), burned(log), fenced, "yes" if exact else "NO"]
    inexact = None
    if not exact:  # what the last releases were on instead: (tick, window, exact - want)
        off = [(tick, window, None if units is None else (units - want) / GRID)
               for tick, window, units in exact_sums(
                   broker.bootstrap, topics.releases, nodes_topic if tree else None,
                   2 * settle)]
        inexact = (f"the final releases are not on the exact sum of the input, {want / GRID:g}, "
                   f"{settle_seconds:g} s after the load stopped; the last {len(off)} releases' "
                   f"(tick, window, exact sum - input sum): {off}")
    return Outcome(row, failed, inexact)


def main(argv: Sequence[str] | None = None) -> int:
    p = _common.parser(NAME, __doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="chaos per scenario (full run)")
    p.add_argument("--seed", type=int, default=46)
    p.add_argument("--scenarios", default=DEFAULT,
                   help=f"comma-separated, of {', '.join(SCENARIOS)} (default {DEFAULT})")
    args = p.parse_args(argv)
    seconds = QUICK_SECONDS if args.quick else args.minutes * 60
    rows, failures = [], []
    tmp = Path(tempfile.mkdtemp(prefix="bench-chaos-"))
    with KafkaBroker(tmp / "kafka") as broker:
        for i, name in enumerate(args.scenarios.split(",")):
            where = tmp / f"{name}-{uuid.uuid4().hex[:6]}"
            where.mkdir()
            got = run_scenario(broker, where, SCENARIOS[name], seconds, args.seed + i)
            rows.append(got.row)
            failures += [f"{name}: {f}" for f in got.duplicates + [got.exact or ""] if f]
    if failures:
        print(f"the workers' logs and data are kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print(_common.text_table(HEADERS, rows))
    for f in failures:
        print(f"FAILED {f}")
    body = (f"{_common.markdown_table(HEADERS, rows)}\n\nSeed {args.seed}; Apache Kafka 2.3.0, "
            f"three workers, {PARTITIONS} input partitions, {USERS} users, a report every "
            f"20 ms, a release every {PERIOD:g} s. Checks: "
            + ("all passed." if not failures else "FAILED: " + "; ".join(failures)))
    _common.report(args, NAME, "Chaos: faults under load on Apache Kafka (issue 46)",
                   _common.command_line(NAME, argv), body)
    return 1 if failures else 0
