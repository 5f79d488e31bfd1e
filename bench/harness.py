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
from stream_app.demo.broker import EmbeddedBroker
from stream_app.faust_adapter.ports_file import reported_port
from stream_app.metrics_page import Samples, local_url, scrape, totals
from stream_app.settings.load import without_settings

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
    env = without_settings()
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
    # its /metrics on a port the OS picks: the pipeline says which in its ports file (no port
    # is chosen first and taken by another process, e.g. a parallel test, before it binds)
    ports_file = log_path.with_suffix(".ports.json")
    env["PUFFERFISH_METRICS_PORT"] = "0"
    env["PUFFERFISH_PORTS_FILE"] = str(ports_file)
    proc = subprocess.Popen(
        [sys.executable, *cmd], env=env, cwd=str(workdir),
        stdin=subprocess.DEVNULL, stdout=open(log_path, "ab"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    return Worker(proc, _metrics_port(proc, ports_file, log_path), log_path, topics)


def _metrics_port(proc: subprocess.Popen[bytes], ports_file: Path, log_path: Path,
                  timeout: float = 60.0) -> int:
    """The port the pipeline's /metrics listens on, once its ports file names it (the worker
    writes it once the topics are checked); RuntimeError if it exits or is silent first."""
    deadline = time.monotonic() + timeout
    while (port := reported_port(ports_file, "metrics", proc.pid)) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-3000:]
            state = "timed out" if proc.poll() is None else f"exited with {proc.returncode}"
            raise RuntimeError(f"the pipeline {state} before its ports file named its metrics "
                               f"port ({ports_file}):\n{tail}")
        time.sleep(0.1)
    return port


def wait_for(worker: Worker | Group, count: float, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while worker.handled() < count:
        worker.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what} "
                               f"(handled {worker.handled():.0f} of {count:.0f})")
        time.sleep(0.2)
