"""Helpers for integration tests: workers as subprocesses, metrics scraping, a reference model.

The reference model re-tracks the stream's per-user state independently of stream_app.domain.state
(plain dicts, no windows) so the expected X is not computed by the code under test, and lists
the public pairs of every configured group itself (docs/privacy.md, "Public calibration").
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from pufferfish_core.calibrators import exact
from pufferfish_core.distribution import Distribution, point_zero
from stream_app import metrics_page as metrics
from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics
from stream_app.faust_adapter.ports_file import reported_port
from stream_app.metrics_page import Samples
from tests.kafka_helpers import consume_all, json_values
from tests.ports import worker_port
from tests.processes import task_dump
from tests.waiting import wait_for as wait_until

REPO = Path(__file__).resolve().parents[2]


def plan_json(settings: Mapping[str, Any], tmp_path: Path) -> dict[str, Any]:
    """`pufferfish plan --json` on these settings (a config file, no PUFFERFISH_ env)."""
    config = tmp_path / "plan.json"
    config.write_text(json.dumps(dict(settings)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-m", "stream_app", "plan", "--config", str(config),
                           "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))

TANSU_KNOBS = {
    "PUFFERFISH_PRODUCER_MAX_BATCH_SIZE": "1",
    "PUFFERFISH_PRODUCER_LINGER_SECONDS": "0",
    "PUFFERFISH_BROKER_SESSION_TIMEOUT": "6",
    "PUFFERFISH_BROKER_REBALANCE_TIMEOUT": "6",
    "PUFFERFISH_BROKER_HEARTBEAT_INTERVAL": "1",
    "PUFFERFISH_CONSUMER_FETCH_MAX_WAIT_SECONDS": "0.1",
}


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    ports_file: Path  # where it writes the ports it listens on (tests/ports.py)
    log_path: Path
    ports: dict[str, int] = field(default_factory=dict)  # those read from ports_file

    @property
    def metrics_port(self) -> int:
        """The port of its /metrics (bound to port 0; waits until it is reported)."""
        return self.port("metrics")

    def port(self, server: str) -> int:
        """The port `server` ("metrics" or "web") listens on, once the worker reports it."""
        if server not in self.ports:
            self.ports[server] = worker_port(self.ports_file, server, self.proc, self.log)
        return self.ports[server]

    def samples(self) -> Samples:
        """Every sample of its /metrics: {} while it does not answer, or before the worker said
        where it listens (waiting for either is the caller's wait)."""
        if "metrics" not in self.ports:
            port = reported_port(self.ports_file, "metrics", self.proc.pid)
            if port is None:
                return {}
            self.ports["metrics"] = port
        return scrape(self.ports["metrics"])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
                raise AssertionError(f"worker ignored signal {sig} for {timeout} s") from None
        return int(self.proc.returncode)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def diagnose(self) -> str:
        """What the live worker waits on (its SIGUSR1 dump), for a failure message."""
        if not self.alive():
            return f"worker exited ({self.proc.returncode}):\n{self.log()}"
        return task_dump(self.proc.pid, lambda: self.log_path.read_text(errors="replace"))


LIVE: list[Worker] = []  # started by start_worker: a barrier that times out dumps them


def worker_env(broker: EmbeddedBroker, tmp_path: Path, **settings: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env.update(TANSU_KNOBS)
    # no learning round (it would charge the budget and move theta) unless a test asks for one
    env["PUFFERFISH_LEARN_PERIOD_SECONDS"] = "86400"
    env["PUFFERFISH_BROKER"] = broker.url
    env["PUFFERFISH_DATA_DIR"] = str(tmp_path / "data")
    env["PUFFERFISH_LOG_LEVEL"] = "info"
    for name, value in settings.items():
        env[f"PUFFERFISH_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    env["PYTHONPATH"] = str(REPO)
    return env


def input_env(broker: EmbeddedBroker, tmp_path: Path, partitions: int, **settings: Any
              ) -> dict[str, str]:
    """Create the input topics (reports, membership) with `partitions` partitions each and
    return the env of a worker configured for that count."""
    asyncio.run(create_topics(broker.bootstrap, {"reports": partitions, "membership": partitions}))
    return worker_env(broker, tmp_path, input_partitions=str(partitions), **settings)


def releases_after(bootstrap: str, since: float, count: int, timeout: float) -> list[dict]:
    """All releases, once at least `count` of them were published after `since`."""

    def enough() -> list[dict[str, Any]]:
        recs = json_values(asyncio.run(consume_all(bootstrap, "releases", timeout=1.0)))
        return recs if len([r for r in recs if r["ts"] > since]) >= count else []

    return wait_until(enough, timeout, f"{count} releases published after t={since:.2f}")


def start_worker(env: Mapping[str, str], tmp_path: Path, name: str) -> Worker:
    """`python -m stream_app run` with its metrics on a port the OS picks (reported in
    tmp_path/<name>.ports.json); log: tmp_path/<name>.log."""
    log_path = tmp_path / f"{name}.log"
    ports_file = tmp_path / f"{name}.ports.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "stream_app", "run"],
        env={**env, "PUFFERFISH_METRICS_PORT": "0", "PUFFERFISH_PORTS_FILE": str(ports_file)},
        cwd=str(tmp_path), stdin=subprocess.DEVNULL, stdout=open(log_path, "ab"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    worker = Worker(proc, ports_file, log_path)
    LIVE[:] = [w for w in LIVE if w.alive()] + [worker]
    return worker


def scrape(port: int) -> Samples:
    """All samples of the /metrics of the worker on this loopback port ({} while not serving)."""
    return metrics.scrape(metrics.local_url(port))


def handled(workers: Iterable[Worker]) -> float:
    """Input records handled (consumed + rejected) summed over workers."""
    total = 0.0
    for w in workers:
        sums = metrics.totals(w.samples())
        total += sums.get("pufferfish_events_applied_total", 0.0)
        total += sums.get("pufferfish_events_rejected_total", 0.0)
    return total


def wait_handled(workers: list[Worker], count: float, timeout: float = 60.0) -> None:
    def guard() -> None:
        for w in workers:
            assert w.alive(), f"worker died while waiting for {count} records handled:\n{w.log()}"

    wait_until(lambda: handled(workers) >= count, timeout, f"{count} input records handled",
               guard=guard, detail=lambda: "\n".join(w.diagnose() for w in workers))


async def produce_raw(
    bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes]]
) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    n = 0
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*futures)
        n = len(futures)
    finally:
        await producer.stop()
    return n


def send(bootstrap: str, topic: str, records: Iterable[tuple[str | bytes | None, Any]]) -> int:
    """Produce (key, value) pairs; dict values are JSON-encoded, bytes sent as they are."""
    encoded = []
    for key, value in records:
        k = key.encode() if isinstance(key, str) else key
        v = value if isinstance(value, bytes) else json.dumps(value).encode()
        encoded.append((k, v))
    return asyncio.run(produce_raw(bootstrap, topic, encoded))


@dataclass
class RefUser:
    present: bool = False
    group: str | None = None
    counts: dict[float, int] = field(default_factory=dict)
    latest: tuple[float, float] | None = None  # (ts, value)
    ids: set[str] = field(default_factory=set)


@dataclass
class Reference:
    """The test's own account of the stream (what the worker should have computed)."""

    domain: tuple[float, ...]
    pairs: tuple[str, ...]
    epsilon: float
    groups: tuple[str, ...] = ("default",)
    users: dict[str, RefUser] = field(default_factory=dict)

    def join(self, uid: str, group: str | None = None) -> dict[str, Any]:
        u = self.users.setdefault(uid, RefUser())
        assert not u.present
        u.present = True
        u.group = group if group is not None else u.group
        ev = {"user_id": uid, "event": "join", "ts": time.time()}
        if group is not None:
            ev["group"] = group
        return ev

    def leave(self, uid: str) -> dict[str, Any]:
        u = self.users[uid]
        assert u.present
        u.present = False
        return {"user_id": uid, "event": "leave", "ts": time.time()}

    def report(self, uid: str, value: float, rid: str) -> dict[str, Any]:
        u = self.users[uid]
        assert u.present and value in self.domain
        ts = time.time()
        if rid not in u.ids:
            u.ids.add(rid)
            u.counts[value] = u.counts.get(value, 0) + 1
            if u.latest is None or ts >= u.latest[0]:
                u.latest = (ts, value)
        return {"user_id": uid, "value": value, "report_id": rid, "ts": ts}

    def x(self) -> float:
        return sum(u.latest[1] for u in self.users.values() if u.present and u.latest)

    def group_pairs(self) -> list[tuple[Distribution, Distribution]]:
        """Every configured group's worst pairs, written out from docs/privacy.md.

        The tests' groups are learned without a declared law: before any learning round each
        starts uniform on the domain with radius 2, a ball that holds every law on the domain,
        so its worst pairs are point masses at the domain's extremes.
        """
        top, low, high = max(self.domain, key=abs), min(self.domain), max(self.domain)
        out: list[tuple[Distribution, Distribution]] = []
        if "value_change" in self.pairs or (
                "distribution_change" in self.pairs and len(self.groups) > 1):
            out.append((Distribution.point(high), Distribution.point(low)))
        if {"value_presence", "distribution_presence"} & set(self.pairs) and top != 0:
            out.append((Distribution.point(top), point_zero()))
        return out

    def theta(self) -> float:
        """The exact rule on every public pair (core.calibrators.exact, audited in tests/core)."""
        return max((exact(a, b, self.epsilon).theta for a, b in self.group_pairs()), default=0.0)


def noise_bound(theta: float, releases: int, fail_prob: float = 1e-6) -> float:
    """A bound all R releases' noise stays within, except with probability < p.

    Discrete Laplace on the grid g: Pr[|noise| > t] <= 2 e^{-t/theta} / (1 + e^{-g/theta})
    <= 2 e^{-t/theta}; union bound over R releases -> t = theta * ln(2R/p).
    """
    return theta * math.log(2 * releases / fail_prob)


BARRIER_VALUE = -987654.321  # in no test's domain: dead-lettered out_of_domain


def barrier(bootstrap: str, partitions: int, tag: str, timeout: float = 60.0) -> None:
    """Return once every input partition of both topics was handled up to now.

    Puts one record that must be rejected at the end of each partition (a report out of every
    test's domain, refused at once, and a leave from a user who never joined) and waits for all
    of their dead letters: partitions are processed in order, so everything produced before is
    handled. (A report of a user who never joined would be held for join_grace_seconds.)
    """
    from tests.kafka_helpers import consume_all, json_values

    uid = f"barrier-{tag}"
    records = {
        "reports": lambda p: {"user_id": uid, "value": BARRIER_VALUE, "report_id": f"{tag}-{p}",
                              "ts": 0.0},
        "membership": lambda p: {"user_id": uid, "event": "leave", "ts": float(p)},
    }

    wanted: set[tuple[str, int, int]] = set()  # (topic, partition, offset) of each record

    async def put() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for topic, make in records.items():
                for p in range(partitions):
                    meta = await producer.send_and_wait(
                        topic, json.dumps(make(p)).encode(), key=uid.encode(), partition=p
                    )
                    wanted.add((topic, p, meta.offset))
        finally:
            await producer.stop()

    asyncio.run(put())
    got: set[tuple[str, int, int]] = set()  # across polls: a timed read may stop short

    def seen() -> bool:
        # a dead letter locates its record by partition and offset (it carries no value)
        for d in json_values(asyncio.run(consume_all(bootstrap, "deadletter", timeout=1.0))):
            got.add((d["source_topic"], d["partition"], d["offset"]))
        return wanted <= got

    def dumps() -> str:
        return "\n".join(w.diagnose() for w in LIVE if w.alive()) or "(no live worker)"

    wait_until(seen, timeout, f"barrier {tag}", interval=0.3, detail=dumps)
