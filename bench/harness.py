"""Pipelines as subprocesses on the embedded broker, shared by the throughput and latency
benchmarks: topic names, the PUFFERFISH_* environment, the processes' counters (scraped from
their Prometheus endpoints) and CPU time, waiting for a count, the machine's load average.

A pipeline is any ``python -m ...`` that reads the worker's settings from PUFFERFISH_* and
exports ``pufferfish_events_applied_total``: the worker (bench/worker_pipeline.py) and the
Faust pipelines (bench/faust_pipelines.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import REPO
from stream_app.demo.broker import EmbeddedBroker, free_port
from stream_app.metrics_page import Samples, fetch, local_url, scrape, totals

PARTITIONS = 4
DOMAIN = tuple(float(v) for v in range(16))
# Faust does not create source topics; tansu needs short group timeouts to start quickly.
# No producer_max_batch_size=1 here: nothing restarts, so the real-cluster defaults
# (batching, linger) are measured.
TANSU_KNOBS = {
    "PUFFERFISH_BROKER_SESSION_TIMEOUT": "6",
    "PUFFERFISH_BROKER_REBALANCE_TIMEOUT": "6",
    "PUFFERFISH_BROKER_HEARTBEAT_INTERVAL": "1",
    "PUFFERFISH_CONSUMER_FETCH_MAX_WAIT_SECONDS": "0.1",  # tansu holds idle fetches that long
}


INPUT_CPU = "pufferfish_input_cpu_seconds_total"  # the worker's Ingest.handle_batch (0: none)
HANDLED = ("pufferfish_events_applied_total", "pufferfish_events_rejected_total")
BENCH_SERIES = (*HANDLED, INPUT_CPU, "pufferfish_releases_total")


@dataclass
class Worker:
    """One pipeline process: its counters, CPU time and log."""

    proc: subprocess.Popen[bytes]
    metrics_port: int
    log_path: Path
    topics: dict[str, str]

    def samples(self, names: Sequence[str] = BENCH_SERIES) -> Samples:
        """Only these series (``?name[]=``): the bench samples every 0.25 s, 60 times
        Prometheus's usual rate, and the worker's whole page (histograms, process and GC
        collectors) costs it ~1 ms to render against ~0.2 ms for these."""
        query = "&".join(f"name[]={name}" for name in names)
        return scrape(f"{local_url(self.metrics_port)}?{query}")

    def counts(self) -> tuple[float, float]:
        """(events handled, input path CPU seconds) from one scrape."""
        sums = totals(self.samples())
        return sum(sums.get(n, 0.0) for n in HANDLED), sums.get(INPUT_CPU, 0.0)

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def total(self, *names: str) -> float:
        sums = totals(self.samples())
        return sum(sums.get(n, 0.0) for n in names)

    def handled(self) -> float:
        return self.total(*HANDLED)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{tail}")

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait(timeout=10)
        return int(self.proc.returncode)


@dataclass
class Group:
    """Several processes of one pipeline (one consumer group): counters are summed."""

    workers: list[Worker]

    def handled(self) -> float:
        return sum(w.handled() for w in self.workers)

    def total(self, *names: str) -> float:
        return sum(w.total(*names) for w in self.workers)

    def cpu_seconds(self) -> float:
        return sum(w.cpu_seconds() for w in self.workers)

    def counts(self) -> tuple[float, float]:
        both = [w.counts() for w in self.workers]
        return sum(h for h, _ in both), sum(c for _, c in both)

    def check_alive(self) -> None:
        for w in self.workers:
            w.check_alive()

    def stop(self, timeout: float = 30.0) -> int:
        codes = [w.stop(timeout) for w in self.workers]
        return max(codes, key=abs)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; NaN elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages (the machine is shared: recorded with a run)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def topic_names(tag: str, run: str = "") -> dict[str, str]:
    """Input topics named after ``tag``; output topics after ``tag`` and ``run``."""
    out = f"{tag}{run}"
    return {
        "reports": f"reports-{tag}", "membership": f"membership-{tag}",
        "releases": f"releases-{out}", "partials": f"partials-{out}",
        "deadletter": f"deadletter-{out}", "priors": f"priors-{out}",
    }


def start_pipeline(
    broker: EmbeddedBroker, workdir: Path, tag: str, cmd: Sequence[str], run: str = "",
    index: int = 0, **settings: Any,
) -> Worker:
    """``python *cmd`` with PUFFERFISH_* env: ``settings`` (JSON unless a string) over the
    broker, app id, data dir, partitions and topics; input topics named after ``tag``, outputs
    and consumer group after ``tag`` + ``run`` (processes of one run share them)."""
    topics = topic_names(tag, run)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env.update(TANSU_KNOBS)
    base: dict[str, Any] = {
        "broker": broker.url, "app_id": f"bench-{tag}{run}",
        "data_dir": str(workdir / f"data{run}-{index}"),
        "log_level": "warning", "input_partitions": str(PARTITIONS),
        **{f"topic_{kind}": name for kind, name in topics.items()},
    }
    base.update(settings)
    for name, value in base.items():
        env[f"PUFFERFISH_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    env["PYTHONPATH"] = str(REPO)
    log_path = workdir / f"worker-{tag}{run}-{cmd[-1]}-{index}.log"
    for _ in range(PORT_ATTEMPTS):
        # free a moment ago: another process (a parallel test) may take it before the pipeline
        # binds it, and the pipeline then exits at once; it is started again on another port
        port = free_port()
        env["PUFFERFISH_METRICS_PORT"] = str(port)
        offset = log_path.stat().st_size if log_path.exists() else 0
        proc = subprocess.Popen(
            [sys.executable, *cmd], env=env, cwd=str(workdir),
            stdin=subprocess.DEVNULL, stdout=open(log_path, "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        if not _lost_its_port(proc, port, log_path, offset):
            break
    return Worker(proc, port, log_path, topics)


PORT_ATTEMPTS = 3


def _lost_its_port(proc: subprocess.Popen[bytes], port: int, log_path: Path,
                   offset: int, timeout: float = 60.0) -> bool:
    """Waits until the pipeline serves its metrics; True when it exited because the port was
    taken (any other exit is left to the caller's ``check_alive``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(log_path, "rb") as log:
                log.seek(offset)
                return b"Address already in use" in log.read()
        if fetch(local_url(port), timeout=1.0) is not None:
            return False
        time.sleep(0.1)
    return False


def wait_for(worker: Worker | Group, count: float, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while worker.handled() < count:
        worker.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what} "
                               f"(handled {worker.handled():.0f} of {count:.0f})")
        time.sleep(0.2)
