"""The pipelines of the throughput benchmark and one pass of each: fresh input topics, the
setup, then a backlog drained while it is produced, timed between two marks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import faust_pipelines, worker_pipeline
from bench.harness import (
    PARTITIONS,
    Group,
    process_cpu_seconds,
    start_pipeline,
    topic_names,
    wait_for,
)
from bench.profiler import Hook
from bench.timing import Sample, cpu_per_event, produce_and_drain, rate_between, start_mark
from bench.workload import Workload, produce_sync
from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


@dataclass
class Run:
    """A pipeline and its results: one rate (CPU, broker CPU) per pass, their means."""

    name: str
    label: str
    cmd: Sequence[str]
    processes: int
    rate: float = float("nan")
    cpu_us: float = float("nan")  # CPU microseconds per event
    pass_rates: list[float] = field(default_factory=list)  # one per pass (rate: their mean)
    pass_cpu_us: list[float] = field(default_factory=list)
    broker_cpu_us: float = float("nan")  # the broker's CPU microseconds per event
    pass_broker_cpu_us: list[float] = field(default_factory=list)
    input_cpu_us: float = float("nan")  # the worker's input path (Ingest.handle_batch)
    pass_input_cpu_us: list[float] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)  # over worker_pipeline.SETTINGS
    events: int = 0
    releases: float = 0.0
    rejected: float = 0.0
    code: int = 0
    # SIGTERM to SIGKILL; stock Faust never stopped on SIGTERM here (exit -9 after 30 s in
    # every run: a minute of each smoke run), and its exit is not measured
    stop_seconds: float = 30.0

    def add_pass(self, samples: Sequence[Sample], lo: float, hi: float) -> None:
        """A pass's rate and CPU per event between the marks ``lo`` and ``hi``."""
        self.pass_rates.append(rate_between(samples, lo, hi))
        self.pass_cpu_us.append(cpu_per_event(samples, lo, hi))
        self.pass_broker_cpu_us.append(cpu_per_event(samples, lo, hi, column=3))
        self.pass_input_cpu_us.append(cpu_per_event(samples, lo, hi, column=4))
        self.rate = _mean(self.pass_rates)
        self.cpu_us = _mean(self.pass_cpu_us)
        self.broker_cpu_us = _mean(self.pass_broker_cpu_us)
        self.input_cpu_us = _mean(self.pass_input_cpu_us)


def all_runs(stores: Sequence[str] = ()) -> list[Run]:
    """Every pipeline of a run, in order (names: RUN_NAMES); with ``stores`` (e.g.
    ``["rocksdb"]``) the 1-process worker also on each of these table stores."""
    faust = faust_pipelines.command
    worker = worker_pipeline.WORKER_CMD
    return [
        Run("stock-bare", "stock Faust, bare: async for over the stream", faust("stock-bare"), 1,
            stop_seconds=5.0),
        Run("stock-recipe", "stock Faust, recipe", faust("stock-recipe"), 1, stop_seconds=5.0),
        Run("bare", "bare Faust: async for over the stream", faust("bare"), 1),
        Run("recipe", "recipe: take_events + per-batch state + changelog sends",
            faust("recipe"), 1),
        Run("w1", "pufferfish worker, 1 process", worker, 1),
        *[Run(f"w1-{store}", f"pufferfish worker, 1 process, {store} store", worker, 1,
              settings={"store": f"{store}://"}) for store in stores],
        Run("w2", "pufferfish worker, 2 processes", worker, 2),
    ]


STORES = ("rocksdb",)  # table stores other than the default (memory) a run can add
RUN_NAMES = tuple(r.name for r in all_runs(STORES))


def wait_all_assigned(
    broker: EmbeddedBroker, group: Group, topics: dict[str, str], work: Workload,
    timeout: float = 90.0,
) -> int:
    """Reports in small rounds until every process handled some in the same round (each owns
    partitions: the group is stable). Returns the events sent."""
    sent = 0
    deadline = time.monotonic() + timeout
    while True:
        before = [w.handled() for w in group.workers]
        sent += produce_sync(broker.bootstrap, topics,
                             [work.report(u) for u in work.present[:200]])
        time.sleep(1.5)
        after = [w.handled() for w in group.workers]
        if all(a > b for a, b in zip(after, before, strict=True)):
            return sent
        group.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError("the worker group did not settle (a process owns nothing)")


def run_pipeline(
    broker: EmbeddedBroker, workdir: Path, tag: str, run: Run, users: int, m: int,
    profile: Hook | None = None,
) -> tuple[dict[str, str], int]:
    """Fresh input topics, setup, then the backlog drained by ``run``; adds a pass to
    run.rate (the mean over passes).
    Returns the topics and the number of records produced to them."""
    topics = topic_names(tag)
    asyncio.run(create_topics(broker.bootstrap, {
        topics["reports"]: PARTITIONS, topics["membership"]: PARTITIONS}))
    work = Workload(users)
    joins, first = work.setup_joins(), work.setup_reports()
    produce_sync(broker.bootstrap, topics, joins)
    group = Group([start_pipeline(broker, workdir, tag, run.cmd, run=f"-{run.name}", index=i,
                                  **{**worker_pipeline.SETTINGS, **run.settings})
                   for i in range(run.processes)])
    try:
        wait_for(group, len(joins), 120, f"{run.label}: the setup joins")
        produce_sync(broker.bootstrap, topics, first)
        done = len(joins) + len(first)
        wait_for(group, done, 60, f"{run.label}: the setup reports")
        if run.processes > 1:
            done += wait_all_assigned(broker, group, topics, work)
            wait_for(group, done, 60, f"{run.label}: the warm-up reports")
        pid = broker.pid
        samples, produced_at = produce_and_drain(
            broker.bootstrap, topics, work.backlog(m), group, done, timeout=300,
            broker_cpu=lambda: process_cpu_seconds(pid) if pid else float("nan"))
        run.add_pass(samples, start_mark(samples, produced_at, done, m), done + 0.95 * m)
        run.events = m
        run.releases = group.total("pufferfish_releases_total")
        run.rejected = group.total("pufferfish_events_rejected_total")
        produced = done + m
        if profile is not None:
            produced += profile(group, work, topics, done + m)
    finally:
        run.code = group.stop(run.stop_seconds)
    return topics, produced
