"""End-to-end throughput on the embedded broker: the worker vs a raw aiokafka consume->produce loop.

One broker, one set of input topics (reports + membership, P partitions). Setup (not timed):
U users join, a churn subset reports once. Then a backlog of M events is produced as fast as
the producer goes (98 % reports from always-present users, 2 % leave/join churn, releases
every second) and the worker's rate is read from its own counters (consumed + rejected) between
the 5 % and 95 % marks of the backlog. The raw loop (aiokafka, no consumer group, partitions
assigned, one ``send`` per record to an output topic, acks=all like Faust) reads the same
topics from the beginning, once after the worker's timed drain and once at the end (nothing
else consuming); its rate is the mean of the two passes. A third pipeline, "Faust alone"
(one Faust agent over the same topics writing each event to a changelog-backed table, nothing
else), separates what Faust itself costs from pufferfish's own per-event work.
A second backlog of M/2 events is then profiled with py-spy attached to the worker (top frames
by own time and by inclusive time in the project's code).
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
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench import _common
from stream_app.local.broker import EmbeddedBroker, create_topics, free_port
from stream_app.metrics import Samples, local_url, scrape, totals

NAME = "throughput"
REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 4
DOMAIN = tuple(float(v) for v in range(16))
# Faust does not create source topics; tansu needs short group timeouts to start quickly.
TANSU_KNOBS = {
    "PUFFERFISH_BROKER_SESSION_TIMEOUT": "6",
    "PUFFERFISH_BROKER_REBALANCE_TIMEOUT": "6",
    "PUFFERFISH_BROKER_HEARTBEAT_INTERVAL": "1",
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


def topic_names(tag: str) -> dict[str, str]:
    return {
        "reports": f"reports-{tag}", "membership": f"membership-{tag}",
        "releases": f"releases-{tag}", "partials": f"partials-{tag}",
        "deadletter": f"deadletter-{tag}", "priors": f"priors-{tag}",
    }


WORKER_CMD = ("-m", "stream_app", "run")
FLOOR_CMD = ("-m", "bench.throughput", "--faust-floor-child")


def start_worker(
    broker: EmbeddedBroker, workdir: Path, tag: str, cmd: Sequence[str] = WORKER_CMD,
    **settings: Any,
) -> Worker:
    """``python -m stream_app run`` with PUFFERFISH_* env; topics named after ``tag``."""
    topics = topic_names(tag)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env.update(TANSU_KNOBS)
    base: dict[str, Any] = {
        "broker": broker.url, "app_id": f"bench-{tag}", "data_dir": str(workdir / "data"),
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
    log_path = workdir / f"worker-{tag}-{cmd[1]}.log"
    proc = subprocess.Popen(
        [sys.executable, *cmd], env=env, cwd=str(workdir),
        stdin=subprocess.DEVNULL, stdout=open(log_path, "ab"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    return Worker(proc, port, log_path, topics)


def wait_for(worker: Worker, count: float, timeout: float, what: str) -> None:
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
def rate_between(samples: Sequence[tuple[float, float]], lo: float, hi: float) -> float:
    """Events/s between the first samples at or above ``lo`` and ``hi`` handled.

    When one sample crosses both marks (a small backlog drained between two samples), the
    sample before it is the start instead, so the rate is not reported as 0.
    """
    i_lo = next(i for i, (_, h) in enumerate(samples) if h >= lo)
    i_hi = next(i for i, (_, h) in enumerate(samples) if h >= hi)
    if i_hi == i_lo and i_lo > 0:
        i_lo -= 1
    (t_lo, h_lo), (t_hi, h_hi) = samples[i_lo], samples[i_hi]
    return (h_hi - h_lo) / max(t_hi - t_lo, 1e-9)


def drain(worker: Worker, start: float, m: int, timeout: float) -> list[tuple[float, float]]:
    """Sample (time, handled) every 0.25 s until ``start + m`` events are handled."""
    samples = []
    deadline = time.monotonic() + timeout
    while True:
        h = worker.handled()
        samples.append((time.perf_counter(), h))
        if h >= start + m:
            return samples
        worker.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker handled {h - start:.0f} of {m} in {timeout:g} s")
        time.sleep(0.25)


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


# --- Faust alone ---------------------------------------------------------------------------
def faust_floor_child() -> int:
    """The cheapest Faust pipeline shaped like the worker (runs in its own process).

    One agent over both input topics (raw bytes), one changelog-backed table write per event
    (key = user id, value = the event's JSON) and nothing else: the rate Faust itself allows
    here. Progress is exported as ``pufferfish_events_consumed_total`` so it is scraped like the
    worker; settings come from the same PUFFERFISH_* variables.
    """
    import faust
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client import Counter as PromCounter

    from stream_app.settings import Settings

    s = Settings()
    registry = CollectorRegistry()
    consumed = PromCounter("pufferfish_events_consumed", "events", ["kind"], registry=registry)
    start_http_server(s.metrics_port or 0, addr="127.0.0.1", registry=registry)
    app = faust.App(
        f"{s.app_id}-floor", broker=s.broker, store="memory://", autodiscover=False,
        processing_guarantee="at_least_once", topic_partitions=s.input_partitions,
        topic_replication_factor=1, consumer_auto_offset_reset="earliest",
        broker_session_timeout=s.broker_session_timeout,
        broker_rebalance_timeout=s.broker_rebalance_timeout,
        broker_heartbeat_interval=s.broker_heartbeat_interval, web_enabled=False,
    )
    inputs = app.topic(s.topic_reports, s.topic_membership, key_type=bytes, value_type=bytes,
                       key_serializer="raw", value_serializer="raw",
                       partitions=s.input_partitions)
    table = app.Table("floor", default=None, partitions=s.input_partitions,
                      schema=faust.Schema(key_serializer="json", value_serializer="json"))
    counter = consumed.labels(kind="any")

    async def process(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            table[(msg.key or b"").decode()] = json.loads(msg.value or b"null")
            counter.inc()

    app.agent(inputs, name="floor")(process)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    worker = faust.Worker(app, loglevel="WARNING", quiet=True, loop=loop,
                          redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0



# --- the benchmark -------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv)[:1] == ["--faust-floor-child"]:
        return faust_floor_child()
    p = _common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--events", type=int, default=20000, help="backlog size M")
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--profile-out", type=Path, help="keep py-spy's raw collapsed stacks here")
    args = p.parse_args(argv)
    users, m = (40, 400) if args.quick else (args.users, args.events)
    started = time.perf_counter()
    tag = uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    profile_rows: tuple[list[tuple[str, float]], list[tuple[str, float]], int] | None = None
    try:
        with EmbeddedBroker(log_path=workdir / "tansu.log") as broker:
            topics = topic_names(tag)
            asyncio.run(create_topics(broker.bootstrap, {
                topics["reports"]: PARTITIONS, topics["membership"]: PARTITIONS,
                f"raw-out-{tag}": PARTITIONS,
            }))
            work = Workload(users)
            joins, first = work.setup_joins(), work.setup_reports()
            produce_sync(broker.bootstrap, topics, joins)
            worker = start_worker(broker, workdir, tag)
            try:
                wait_for(worker, len(joins), 120, "the setup joins")
                produce_sync(broker.bootstrap, topics, first)
                setup = len(joins) + len(first)
                wait_for(worker, setup, 60, "the setup reports")

                backlog = work.backlog(m)
                produce_start = time.perf_counter()
                produce_sync(broker.bootstrap, topics, backlog)
                produce_seconds = time.perf_counter() - produce_start
                samples = drain(worker, setup, m, timeout=240)
                worker_rate = rate_between(samples, setup + 0.05 * m, setup + 0.95 * m)
                releases = worker.total("pufferfish_releases_total")
                rejected = worker.total("pufferfish_events_rejected_total")
                total_in = setup + m
                inputs = [topics["reports"], topics["membership"]]
                raw_passes = [asyncio.run(raw_loop(
                    broker.bootstrap, inputs, PARTITIONS, total_in, f"raw-out-{tag}"))]

                spy = None if args.no_profile else py_spy()
                if spy is not None:
                    extra = work.backlog(max(m // 2, 1))
                    out = workdir / "profile.txt"
                    duration = 10 if args.quick else 30
                    prof = subprocess.Popen(
                        [spy, "record", "--pid", str(worker.proc.pid), "--format", "raw",
                         "-o", str(out), "-r", "100", "--nonblocking", "-d", str(duration)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.0)
                    produce_sync(broker.bootstrap, topics, extra)
                    drain(worker, total_in, len(extra), timeout=240)
                    prof.send_signal(signal.SIGINT)  # stop sampling now; py-spy writes the file
                    prof.wait(timeout=60)
                    total_in += len(extra)
                    if out.exists():
                        profile_rows = top_frames(out.read_text(errors="replace"))
                        if args.profile_out is not None:
                            shutil.copyfile(out, args.profile_out)
            finally:
                code = worker.stop()
            floor = start_worker(broker, workdir, tag, cmd=FLOOR_CMD)
            try:
                samples = drain(floor, 0, total_in, timeout=240)
                floor_rate = rate_between(samples, 0.05 * total_in, 0.95 * total_in)
            finally:
                floor.stop()
            # the second raw pass runs last: the two passes bracket the worker and Faust runs
            raw_passes.append(asyncio.run(raw_loop(
                broker.bootstrap, inputs, PARTITIONS, total_in, f"raw-out-{tag}")))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.perf_counter() - started

    raw_rates = [n / seconds for n, seconds in raw_passes]
    raw_rate = sum(raw_rates) / len(raw_rates)
    ratio = worker_rate / raw_rate
    raw_text = ", ".join(
        f"{n} records at {r:,.0f}/s" for (n, _), r in zip(raw_passes, raw_rates, strict=True)
    )
    headers = ("pipeline", "events", "events/s", "ratio to raw")
    rows = [
        ("raw aiokafka consume->produce (mean of passes)", raw_passes[0][0], raw_rate, 1.0),
        ("Faust alone: agent + table write per event", total_in, floor_rate,
         floor_rate / raw_rate),
        ("pufferfish worker (exact, K=16, releases 1/s)", m, worker_rate, ratio),
    ]
    verdict = "yes" if ratio >= 0.5 else "NO"
    print(f"end-to-end throughput, {PARTITIONS} partitions, {users} users, backlog {m} events "
          f"(produced in {produce_seconds:.1f} s)")
    print(_common.text_table(headers, rows))
    print(f"raw loop passes: {raw_text}")
    print(f"worker: {releases:.0f} releases, {rejected:.0f} rejected records, exit code {code}; "
          f"goal >= 0.5x raw: {verdict}; total {elapsed:.0f} s")
    prof_md = ""
    if profile_rows is not None:
        own, incl, total = profile_rows
        print(f"\npy-spy on the worker ({total} samples at 100 Hz): top frames by own time")
        print(_common.text_table(("frame", "% samples"), own))
        print("\ntop project frames by inclusive time")
        print(_common.text_table(("frame", "% samples"), incl))
        prof_md = (
            f"\n\n**Profile** (py-spy record --nonblocking at 100 Hz on the worker while it drains "
            f"a further {max(m // 2, 1)} events; {total} samples). Top 10 by own time:\n\n"
            + _common.markdown_table(("frame", "% samples"), own)
            + "\n\nTop 10 project frames (stream_app/, core/; entry point left out) by "
            "inclusive time:\n\n"
            + _common.markdown_table(("frame", "% samples"), incl)
        )
    body = (
        __doc__.split("\n", 1)[1].strip()
        + f"\n\nWorker settings: {PARTITIONS} input partitions, domain K = {len(DOMAIN)}, "
        "pairs distribution_presence, rule exact, one group (learned priors, uniform round-0 "
        "law, no learning round during the run), release every 1 s, memory store, default "
        f"producer batching. Users {users}, backlog M = {m} (produced in "
        f"{produce_seconds:.1f} s, faster than either consumer). Raw loop passes: "
        f"{raw_text}. Worker: {releases:.0f} releases, {rejected:.0f} rejected. "
        f"Run time {elapsed:.0f} s.\n\n"
        + _common.markdown_table(headers, rows)
        + f"\n\n**Ratio worker / raw = {ratio:.3f}** (goal >= 0.5: {verdict})."
        + prof_md + "\n"
    )
    _common.report(args, NAME, "1. End-to-end throughput vs a raw aiokafka loop",
                   _common.command_line(NAME, argv), body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
