"""End-to-end throughput on the embedded broker: the worker, Faust baselines and a raw loop.

One broker; each pipeline gets its own input topics (reports + membership, P partitions) with
the same content: U users join, a churn subset reports once (setup, consumed before the
backlog), then a backlog of M events (98 % reports from always-present users, 2 % leave/join
churn) is produced as fast as the producer goes while the pipeline drains it. Its rate is
read from its own counters (Prometheus, summed over its processes, sampled every 0.25 s from
the first backlog record on) from the first sample after the backlog is fully produced (the
producer no longer competes for the cores) to the 95 % mark; a pipeline that leaves less than
35 % of the backlog by then is read from the 5 % mark. Pipelines:
- raw: an aiokafka consume->produce loop (no consumer group, partitions assigned, one ``send``
  per record to an output topic, acks=all like Faust) over the worker's input topics from the
  beginning; run once after the first worker pass and once at the end, rate = the mean;
- stock Faust, bare and recipe (below) on stock Faust: Faust's own consumer, drain loop
  (``Consumer._drain_messages``), transport and flow control; what the worker would be without
  its consumer (bench/faust_pipelines.py);
- bare Faust: ``async for`` over the stream of both input topics, nothing else (Faust's own
  ceiling here), on the worker's Faust app (its consumer, drain loop and flow control);
- recipe: the fastest known Faust pipeline with per-user state and no pufferfish logic
  (``take_events`` batches, per-batch dict, each touched user's state decoded from and
  written to the table's store once per batch and one changelog record per touched user via
  ``app.producer.send``), on the worker's Faust app;
- the pufferfish worker (exact rule, K = 16, one group, releases every second), 1 process;
- the same worker, 2 processes in one consumer group;
All Faust pipelines share the worker's Faust settings, worker class, event loop, logging,
frozen start-up heap and collector thresholds, and run without Faust's Monitor sensor: a stock
pipeline differs from its twin by the consumer alone.
The Faust pipelines run ``--passes`` times (default 2) in turn — stock bare, stock recipe,
bare, recipe, worker, ..., then all again — so that a slow minute of a shared machine falls on
every pipeline alike; a pipeline's rate is the mean of its passes. Each is reported as a ratio
to the raw loop and to the stock Faust recipe (worker / stock recipe: the worker against
plain Faust; recipe / stock recipe and bare / stock bare: the gain of the worker's consumer
alone), and the worker as a ratio to the recipe of the same drain mode (also per pass); CPU
us/event is the pipeline's processes' CPU time (user + system) per event between the same
marks, broker CPU the same for the broker process (it shares the 2 cores: a pipeline that
writes more, e.g. larger changelog values, also costs the broker more). Goals: the worker
at 1 process >= 0.18x raw (>= 0.38x the aim of the inline hand-off) and >= 0.9x the recipe,
>= 1.3x the stock Faust recipe; 2 processes >= 0.28x raw. The consumer's idle-fetch
wait is 0.1 s (tansu; stock Faust keeps its hard-coded 1.5 s, which a backlog's fetches do not
wait for). A further backlog of M/2 events can be profiled with py-spy attached to one
pipeline's process (``--profile [PIPELINE]``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench import _common, faust_pipelines
from stream_app.local.broker import EmbeddedBroker, create_topics, free_port
from stream_app.metrics import Samples, local_url, scrape, totals

NAME = "throughput"
REPO = Path(__file__).resolve().parents[1]
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

Record = tuple[str, bytes, bytes]  # topic, key, value


# --- the worker as a subprocess ------------------------------------------------------------
@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    metrics_port: int
    log_path: Path
    topics: dict[str, str]

    def samples(self) -> Samples:
        return scrape(local_url(self.metrics_port))

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def total(self, *names: str) -> float:
        sums = totals(self.samples())
        return sum(sums.get(n, 0.0) for n in names)

    def handled(self) -> float:
        return self.total("pufferfish_events_consumed_total", "pufferfish_events_rejected_total")

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


def topic_names(tag: str, run: str = "") -> dict[str, str]:
    """Input topics named after ``tag``; output topics after ``tag`` and ``run``."""
    out = f"{tag}{run}"
    return {
        "reports": f"reports-{tag}", "membership": f"membership-{tag}",
        "releases": f"releases-{out}", "partials": f"partials-{out}",
        "deadletter": f"deadletter-{out}", "priors": f"priors-{out}",
    }


WORKER_CMD = ("-m", "stream_app", "run")


def start_worker(
    broker: EmbeddedBroker, workdir: Path, tag: str, cmd: Sequence[str] = WORKER_CMD,
    run: str = "", index: int = 0, **settings: Any,
) -> Worker:
    """``python -m stream_app run`` with PUFFERFISH_* env; input topics named after ``tag``,
    outputs and consumer group after ``tag`` + ``run`` (processes of one run share them)."""
    topics = topic_names(tag, run)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env.update(TANSU_KNOBS)
    base: dict[str, Any] = {
        "broker": broker.url, "app_id": f"bench-{tag}{run}",
        "data_dir": str(workdir / f"data{run}-{index}"),
        "log_level": "warning", "input_partitions": str(PARTITIONS), "domain": list(DOMAIN),
        "pairs": ["distribution_presence"], "rule": "exact", "budget_total": "1e12",
        "release_period_seconds": "1", "topic_reports": topics["reports"],
        "topic_membership": topics["membership"], "topic_releases": topics["releases"],
        "topic_partials": topics["partials"], "topic_deadletter": topics["deadletter"],
        "topic_priors": topics["priors"],
        # learned priors (round 0: uniform on the domain) with no learning round in a run
        "prior_source": "learned", "learn_period_seconds": "86400",
    }
    base.update(settings)
    for name, value in base.items():
        env[f"PUFFERFISH_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    port = free_port()
    env["PUFFERFISH_METRICS_PORT"] = str(port)
    env["PYTHONPATH"] = str(REPO)
    log_path = workdir / f"worker-{tag}{run}-{cmd[-1]}-{index}.log"
    proc = subprocess.Popen(
        [sys.executable, *cmd], env=env, cwd=str(workdir),
        stdin=subprocess.DEVNULL, stdout=open(log_path, "ab"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    return Worker(proc, port, log_path, topics)


def wait_for(worker: Worker | Group, count: float, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while worker.handled() < count:
        worker.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what} "
                               f"(handled {worker.handled():.0f} of {count:.0f})")
        time.sleep(0.2)


# --- the workload --------------------------------------------------------------------------
@dataclass
class Workload:
    """Valid events for U users: ``present`` users report, ``churn`` users leave and rejoin."""

    users: int
    seed: int = 1
    churn_share: float = 0.1
    rng: random.Random = field(init=False)
    present: list[str] = field(init=False)
    churn: list[str] = field(init=False)
    churn_in: dict[str, bool] = field(init=False)
    next_id: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        ids = [f"user-{i:06d}" for i in range(self.users)]
        n_churn = max(1, int(self.users * self.churn_share))
        self.churn, self.present = ids[:n_churn], ids[n_churn:]
        self.churn_in = dict.fromkeys(self.churn, True)

    def join(self, uid: str) -> tuple[str, str, dict[str, Any]]:
        return "membership", uid, {"user_id": uid, "event": "join", "ts": time.time()}

    def report(self, uid: str, value: float | None = None) -> tuple[str, str, dict[str, Any]]:
        self.next_id += 1
        v = self.rng.choice(DOMAIN) if value is None else value
        return "reports", uid, {"user_id": uid, "value": v, "report_id": f"r{self.next_id}",
                                "ts": time.time()}

    def setup_joins(self) -> list[tuple[str, str, dict[str, Any]]]:
        return [self.join(u) for u in self.churn + self.present]

    def setup_reports(self) -> list[tuple[str, str, dict[str, Any]]]:
        return [self.report(u) for u in self.churn]

    def backlog(
        self, m: int, membership_share: float = 0.02
    ) -> list[tuple[str, str, dict[str, Any]]]:
        out = []
        for _ in range(m):
            if self.rng.random() < membership_share:
                uid = self.rng.choice(self.churn)
                was_in = self.churn_in[uid]
                self.churn_in[uid] = not was_in
                event = "leave" if was_in else "join"
                out.append(("membership", uid, {"user_id": uid, "event": event, "ts": time.time()}))
            else:
                out.append(self.report(self.rng.choice(self.present)))
        return out


async def produce(
    bootstrap: str, topics: dict[str, str], events: Iterable[tuple[str, str, dict[str, Any]]]
) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topics[t], json.dumps(v).encode(), key=k.encode())
            for t, k, v in events
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return len(futures)


def produce_sync(bootstrap: str, topics: dict[str, str], events: Sequence[Any]) -> int:
    return asyncio.run(produce(bootstrap, topics, events))


# --- the baseline --------------------------------------------------------------------------
async def raw_loop(
    bootstrap: str, topics: Sequence[str], partitions: int, total: int, out_topic: str,
    timeout: float = 120.0,
) -> tuple[int, float]:
    """Consume ``total`` records of ``topics`` from the start, send one record each.

    Returns (records, seconds from the first fetched batch to the last send acknowledged).
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await consumer.start()
    await producer.start()
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        n, start, pending = 0, None, []
        deadline = time.monotonic() + timeout
        while n < total:
            if time.monotonic() > deadline:
                raise RuntimeError(f"raw loop: {n} of {total} records in {timeout:g} s")
            batch = await consumer.getmany(timeout_ms=500)
            if not batch:
                continue
            if start is None:
                start = time.perf_counter()
            for records in batch.values():
                for rec in records:
                    pending.append(await producer.send(out_topic, rec.value, key=rec.key))
                    n += 1
            if len(pending) > 2000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        assert start is not None
        return n, time.perf_counter() - start
    finally:
        await consumer.stop()
        await producer.stop()


# --- measuring the worker ------------------------------------------------------------------
Sample = tuple[float, ...]  # (time, handled[, pipeline CPU seconds, broker CPU seconds])


def _marks(samples: Sequence[Sample], lo: float, hi: float) -> tuple[Sample, Sample]:
    """The first samples at or above ``lo`` and ``hi`` handled. When one sample crosses both
    marks (a small backlog drained between two samples), the sample before it is the start."""
    i_lo = next(i for i, s in enumerate(samples) if s[1] >= lo)
    i_hi = next(i for i, s in enumerate(samples) if s[1] >= hi)
    if i_hi == i_lo and i_lo > 0:
        i_lo -= 1
    return samples[i_lo], samples[i_hi]


def rate_between(samples: Sequence[Sample], lo: float, hi: float) -> float:
    """Events/s between the first samples at or above ``lo`` and ``hi`` handled."""
    a, b = _marks(samples, lo, hi)
    return (b[1] - a[1]) / max(b[0] - a[0], 1e-9)


def cpu_per_event(samples: Sequence[Sample], lo: float, hi: float, column: int = 2) -> float:
    """CPU microseconds per event between the same marks: the pipeline's processes
    (column 2) or the broker's (column 3)."""
    a, b = _marks(samples, lo, hi)
    return (b[column] - a[column]) * 1e6 / max(b[1] - a[1], 1.0)


def drain(
    worker: Worker | Group, start: float, m: int, timeout: float,
    check: Callable[[], None] = lambda: None, broker_cpu: Callable[[], float] = lambda: 0.0,
) -> list[Sample]:
    """Sample (time, handled, CPU seconds, broker CPU seconds) every 0.25 s until
    ``start + m`` are handled; ``check`` raises to stop early (a failed producer)."""
    samples: list[Sample] = []
    deadline = time.monotonic() + timeout
    while True:
        h = worker.handled()
        samples.append((time.perf_counter(), h, worker.cpu_seconds(), broker_cpu()))
        if h >= start + m:
            return samples
        worker.check_alive()
        check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker handled {h - start:.0f} of {m} in {timeout:g} s")
        time.sleep(0.25)


def produce_and_drain(
    bootstrap: str, topics: dict[str, str], events: Sequence[Any], worker: Worker | Group,
    start: float, timeout: float, broker_cpu: Callable[[], float] = lambda: 0.0,
) -> tuple[list[Sample], float]:
    """Produce ``events`` (in a thread) while sampling the pipeline from the first one on: a
    pipeline faster than the producer drains much of the backlog while it is produced, so
    sampling only afterwards missed the 5 % mark (or both marks: a rate of 0). Returns the
    samples and when the last event was produced (``time.perf_counter``)."""
    failed: list[BaseException] = []
    produced_at: list[float] = []

    def produce_all() -> None:
        try:
            produce_sync(bootstrap, topics, events)
            produced_at.append(time.perf_counter())
        except BaseException as exc:  # noqa: BLE001 - re-raised by the sampling loop
            failed.append(exc)

    def check() -> None:
        if failed:
            raise RuntimeError("producing the backlog failed") from failed[0]

    thread = threading.Thread(target=produce_all, name="backlog-producer", daemon=True)
    thread.start()
    try:
        samples = drain(worker, start, len(events), timeout, check, broker_cpu)
    finally:
        thread.join(timeout)
    check()
    return samples, produced_at[0] if produced_at else time.perf_counter()


def start_mark(samples: Sequence[Sample], produced_at: float, start: float, m: int) -> float:
    """Where a rate is read from: the first sample once the backlog is fully produced (the
    producer no longer competes for the 2 cores), when at least 35 % of the backlog is left
    then; else (a pipeline about as fast as the producer) the 5 % mark."""
    lo = start + 0.05 * m
    after = next((s[1] for s in samples if s[0] >= produced_at), None)
    return max(lo, after) if after is not None and after <= start + 0.65 * m else lo


# --- profiling -----------------------------------------------------------------------------
# The worker's entry point wraps every sample of the main thread: it says nothing.
ENTRY_FRAMES = re.compile(r"\(stream_app/(__main__|cli|runner)\.py\)$")
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def frame_name(raw: str) -> str:
    m = FRAME.match(raw.strip())
    return f"{m['func']} ({m['file']})" if m else raw.strip()


Frames = list[tuple[str, float]]


def top_frames(collapsed: str, n: int = 10) -> tuple[Frames, Frames, int]:
    """(top own-time frames, top inclusive frames in stream_app/ or core/, samples).

    The inclusive list leaves out the entry point (__main__, cli, runner): it wraps everything.
    """
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        total += c
        frames = [frame_name(f) for f in stack.split(";")]
        own[frames[-1]] += c
        for f in set(frames):
            if ("stream_app/" in f or "core/" in f) and not ENTRY_FRAMES.search(f):
                incl[f] += c
    pct = 100.0 / max(total, 1)
    return ([(f, c * pct) for f, c in own.most_common(n)],
            [(f, c * pct) for f, c in incl.most_common(n)], total)


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return found if Path(found).exists() else None


# --- the benchmark -------------------------------------------------------------------------
@dataclass
class Run:
    name: str
    label: str
    cmd: Sequence[str]
    processes: int
    settings: dict[str, str] = field(default_factory=dict)
    rate: float = float("nan")
    cpu_us: float = float("nan")  # CPU microseconds per event
    pass_rates: list[float] = field(default_factory=list)  # one per pass (rate: their mean)
    pass_cpu_us: list[float] = field(default_factory=list)
    broker_cpu_us: float = float("nan")  # the broker's CPU microseconds per event
    pass_broker_cpu_us: list[float] = field(default_factory=list)
    events: int = 0
    releases: float = 0.0
    rejected: float = 0.0
    code: int = 0


def all_runs() -> list[Run]:
    """Every pipeline of a run, in order (names: RUN_NAMES)."""
    return default_runs()


def default_runs() -> list[Run]:
    return [
        Run("stock-bare", "stock Faust, bare: async for over the stream",
            faust_pipelines.command("stock-bare"), 1),
        Run("stock-recipe", "stock Faust, recipe", faust_pipelines.command("stock-recipe"), 1),
        Run("bare", "bare Faust: async for over the stream", faust_pipelines.command("bare"), 1),
        Run("recipe", "recipe: take_events + per-batch state + changelog sends",
            faust_pipelines.command("recipe"), 1),
        Run("w1", "pufferfish worker, 1 process", WORKER_CMD, 1),
        Run("w2", "pufferfish worker, 2 processes", WORKER_CMD, 2),
    ]


RUN_NAMES = tuple(r.name for r in all_runs())


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
    profile: Callable[[Group, Workload, dict[str, str], float], int] | None = None,
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
    group = Group([start_worker(broker, workdir, tag, cmd=run.cmd, run=f"-{run.name}", index=i,
                                **run.settings)
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
        lo = start_mark(samples, produced_at, done, m)
        run.pass_rates.append(rate_between(samples, lo, done + 0.95 * m))
        run.pass_cpu_us.append(cpu_per_event(samples, lo, done + 0.95 * m))
        run.pass_broker_cpu_us.append(cpu_per_event(samples, lo, done + 0.95 * m, column=3))
        run.rate = sum(run.pass_rates) / len(run.pass_rates)
        run.cpu_us = sum(run.pass_cpu_us) / len(run.pass_cpu_us)
        run.broker_cpu_us = sum(run.pass_broker_cpu_us) / len(run.pass_broker_cpu_us)
        run.events = m
        run.releases = group.total("pufferfish_releases_total")
        run.rejected = group.total("pufferfish_events_rejected_total")
        produced = done + m
        if profile is not None:
            produced += profile(group, work, topics, done + m)
    finally:
        run.code = group.stop()
    return topics, produced


def profile_worker(
    workdir: Path, broker: EmbeddedBroker, m: int, quick: bool, keep: Path | None,
    rate: int = 100,
) -> tuple[Callable[[Group, Workload, dict[str, str], float], int], list[Any]]:
    """A ``run_pipeline`` hook: py-spy on the pipeline's first process while it drains a
    further M/2 events."""
    found: list[Any] = []

    def hook(group: Group, work: Workload, topics: dict[str, str], done: float) -> int:
        spy = py_spy()
        if spy is None:
            return 0
        extra = work.backlog(max(m // 2, 1))
        out = workdir / "profile.txt"
        prof = subprocess.Popen(
            [spy, "record", "--pid", str(group.workers[0].proc.pid), "--format", "raw",
             "-o", str(out), "-r", str(rate), "--nonblocking", "-d", str(10 if quick else 30)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        produce_sync(broker.bootstrap, topics, extra)
        drain(group, done, len(extra), timeout=240)
        prof.send_signal(signal.SIGINT)  # stop sampling now; py-spy writes the file
        prof.wait(timeout=60)
        if out.exists():
            found.append(top_frames(out.read_text(errors="replace")))
            if keep is not None:
                shutil.copyfile(out, keep)
        return len(extra)

    return hook, found


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    p = _common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--events", type=int, default=50000, help="backlog size M")
    p.add_argument("--profile", nargs="?", const="w1", choices=RUN_NAMES, metavar="PIPELINE",
                   help="py-spy on this pipeline's (first) process; default w1, the "
                   f"1-process worker ({', '.join(RUN_NAMES)})")
    p.add_argument("--pipelines", type=lambda v: v.split(","), metavar="A,B",
                   help="run only these pipelines (e.g. recipe,w1; the raw loop always runs); "
                   "prints only, RESULTS.md is left alone")
    p.add_argument("--profile-out", type=Path, help="keep py-spy's raw collapsed stacks here")
    p.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second")
    p.add_argument("--passes", type=int, default=2,
                   help="run every pipeline this many times, in turn (rates: the mean)")
    args = p.parse_args(argv)
    unknown = set(args.pipelines or ()) - set(RUN_NAMES)
    if unknown:
        p.error(f"unknown pipelines {sorted(unknown)}; choose from {', '.join(RUN_NAMES)}")
    users, m = (40, 400) if args.quick else (args.users, args.events)
    passes = 1 if args.quick else max(1, args.passes)
    started = time.perf_counter()
    load_before = loadavg()
    tag = uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    runs = all_runs()
    if args.pipelines:
        runs = [r for r in runs if r.name in args.pipelines]
        args.no_write = True
    profile_rows: tuple[Frames, Frames, int] | None = None
    raw_passes: list[tuple[int, float]] = []
    try:
        with EmbeddedBroker(log_path=workdir / "tansu.log") as broker:
            raw_topics: dict[str, str] | None = None
            raw_total = 0
            for run, pass_no in [(r, k) for k in range(passes) for r in runs]:
                hook: Callable[[Group, Workload, dict[str, str], float], int] | None = None
                found: list[Any] = []
                if run.name == args.profile and pass_no == 0:
                    hook, found = profile_worker(workdir, broker, m, args.quick,
                                                 args.profile_out, args.profile_rate)
                topics, produced = run_pipeline(broker, workdir, f"{tag}{run.name}{pass_no}",
                                                run, users, m, profile=hook)
                if found:
                    profile_rows = found[0]
                if raw_topics is None and (run.name == "w1" or run is runs[-1]):
                    raw_topics = topics
                    asyncio.run(create_topics(broker.bootstrap, {f"raw-out-{tag}": PARTITIONS}))
                    raw_total = produced
                    raw_passes.append(asyncio.run(raw_loop(
                        broker.bootstrap, [topics["reports"], topics["membership"]],
                        PARTITIONS, raw_total, f"raw-out-{tag}")))
            assert raw_topics is not None
            raw_passes.append(asyncio.run(raw_loop(
                broker.bootstrap, [raw_topics["reports"], raw_topics["membership"]],
                PARTITIONS, raw_total, f"raw-out-{tag}")))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.perf_counter() - started
    load_after = loadavg()

    raw_rates = [n / seconds for n, seconds in raw_passes]
    raw_rate = sum(raw_rates) / len(raw_rates)
    by = {r.name: r for r in all_runs()}  # a pipeline left out (--pipelines): NaN
    by.update({r.name: r for r in runs})
    recipe, stock = by["recipe"].rate, by["stock-recipe"].rate
    raw_text = ", ".join(
        f"{n} records at {r:,.0f}/s" for (n, _), r in zip(raw_passes, raw_rates, strict=True)
    )
    headers = ("pipeline", "processes", "events", "events/s", "ratio to raw",
               "ratio to recipe", "ratio to stock Faust recipe",
               "CPU us/event", "broker CPU us/event")
    rows: list[tuple[object, ...]] = [
        ("raw aiokafka consume->produce (mean of 2 passes)", 1, raw_passes[0][0], raw_rate,
         1.0, float("nan"), float("nan"), float("nan"), float("nan")),
    ]
    for r in runs:
        rows.append((r.label, r.processes, r.events, r.rate, r.rate / raw_rate,
                     r.rate / recipe if r.name.startswith("w") else float("nan"),
                     r.rate / stock, r.cpu_us, r.broker_cpu_us))
    w1, w2 = by["w1"], by["w2"]
    goals = [
        ("worker, 1 process >= 0.18x raw", w1.rate / raw_rate >= 0.18),
        ("worker, 1 process >= 0.38x raw", w1.rate / raw_rate >= 0.38),
        ("worker, 1 process >= 0.9x recipe", w1.rate / recipe >= 0.9),
        ("worker, 1 process >= 1.3x stock Faust recipe", w1.rate / stock >= 1.3),
        ("worker, 2 processes >= 0.28x raw", w2.rate / raw_rate >= 0.28),
    ]
    goal_text = "; ".join(f"{g}: {'yes' if ok else 'NO'}" for g, ok in goals)
    pass_pairs = [(w1, by["recipe"]), (w1, by["stock-recipe"]), (by["recipe"], by["stock-recipe"])]
    per_pass = "; ".join(
        f"{w.name}/{r.name} " + ", ".join(f"{a / b:.3f}" for a, b in
                                          zip(w.pass_rates, r.pass_rates, strict=False))
        for w, r in pass_pairs if w.pass_rates and r.pass_rates)
    stock_text = (
        f"worker / stock Faust recipe = {w1.rate / stock:.3f} (1 process), "
        f"{w2.rate / stock:.3f} (2 processes); recipe / stock recipe = {recipe / stock:.3f} "
        f"and bare / stock bare = {by['bare'].rate / by['stock-bare'].rate:.3f} (the worker's "
        "consumer alone)")
    codes = ", ".join(f"{r.name} {r.code}" for r in runs)
    print(f"end-to-end throughput, {PARTITIONS} partitions, {users} users, backlog {m} events "
          f"per pipeline; load average before {load_before}, after {load_after}")
    print(_common.text_table(headers, rows))
    print(f"raw loop passes: {raw_text}")
    print(f"worker releases: {w1.releases:.0f} (1 process), {w2.releases:.0f} (2); rejected "
          f"records: {w1.rejected:.0f}, {w2.rejected:.0f}; exit codes: {codes}")
    print(stock_text)
    print(f"per pass: {per_pass or 'n/a'}")
    print(f"{goal_text}; total {elapsed:.0f} s")
    prof_md = ""
    if profile_rows is not None:
        own, incl, total = profile_rows
        print(f"\npy-spy on {args.profile} ({total} samples at {args.profile_rate} Hz): top "
              "frames by own time")
        print(_common.text_table(("frame", "% samples"), own))
        print("\ntop project frames by inclusive time")
        print(_common.text_table(("frame", "% samples"), incl))
        prof_md = (
            f"\n\n**Profile** (py-spy record --nonblocking at {args.profile_rate} Hz on "
            f"{args.profile} "
            f"while it drains a further {max(m // 2, 1)} events; {total} samples). Top 10 by "
            "own time:\n\n"
            + _common.markdown_table(("frame", "% samples"), own)
            + "\n\nTop 10 project frames (stream_app/, core/; entry point left out) by "
            "inclusive time:\n\n"
            + _common.markdown_table(("frame", "% samples"), incl)
        )
    body = (
        __doc__.split("\n", 1)[1].strip()
        + f"\n\nLoad average (1, 5, 15 min) before the run: {load_before}; after: "
        f"{load_after}. Worker settings: {PARTITIONS} input partitions, domain K = "
        f"{len(DOMAIN)}, pairs distribution_presence, rule exact, one group (learned priors, "
        "uniform round-0 law, no learning round during the run), release every 1 s, memory "
        "store, defaults otherwise (batch_max_events 10000, batch_within_seconds 0.2, "
        "producer linger 0.01 s with batching, uvloop); the recipe uses the same Faust "
        f"settings. Users {users}, backlog M = {m} per pipeline. Raw loop passes: "
        f"{raw_text}. Worker releases: {w1.releases:.0f} (1 process), {w2.releases:.0f} "
        f"(2 processes); rejected records {w1.rejected:.0f}, {w2.rejected:.0f}. "
        f"Run time {elapsed:.0f} s.\n\n"
        + _common.markdown_table(headers, rows)
        + f"\n\n**Ratio worker / raw = {w1.rate / raw_rate:.3f}** (1 process), "
        f"{w2.rate / raw_rate:.3f} (2 processes); worker / recipe = {w1.rate / recipe:.2f}; "
        f"**{stock_text}**."
        + f" Per pass: {per_pass or 'n/a'}. Goals: {goal_text}."
        + prof_md + "\n"
    )
    _common.report(args, NAME, "1. End-to-end throughput vs a raw aiokafka loop",
                   _common.command_line(NAME, argv), body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
