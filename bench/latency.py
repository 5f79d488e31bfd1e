"""Release latency: time from a report's production to the first release that includes it.

Method (own measurement, exact inclusion): a marker user reports strictly increasing values
v_j = 16 + j (background users report 0..15) with pairs distribution_presence + value_presence,
so the user's theta is v_j / eps (core.user_theta gives the expected theta_j; background users
stay below theta_0). A release includes marker j iff its theta exceeds the midpoint between
theta_{j-1} and theta_j, because the marker user's events are processed in order and nobody
else reaches that theta. Latency of marker j = ``ts`` of the first such release (the worker's
publish time, same host clock) - the time just before the marker was sent. It therefore
includes the wait for the next release tick (release_period_seconds = 1 s, partials every
0.25 s): the floor is ~0.5 s on average by design. Markers go out every 0.5 s.

Loads: the worker's capacity is measured first in the same run (a backlog drained, 5-95 %),
then background events (the throughput benchmark's mix: reports + 2 % join/leave churn) are
offered at 5 % (light) and 100 % (saturating) of it. The worker's own
``pufferfish_release_lag_seconds`` (release publish time - newest included event ts, i.e. the
lag of the *newest* event, a lower bound) is shown beside it: its _sum/_count are polled every
0.2 s, which yields each release's exact value (releases are 1 s apart). Releases in the first
1.5 s of a phase are left out: they hold no event of the phase yet, and the metric then shows
how stale the newest event is (it grows by 1 s per release while no event arrives), not a
latency.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench import _common
from bench.throughput import (
    DOMAIN,
    PARTITIONS,
    Worker,
    Workload,
    drain,
    produce_sync,
    rate_between,
    start_worker,
    topic_names,
    wait_for,
)
from core.distribution import Distribution
from core.user_theta import PairKind, user_theta
from stream_app.broker import EmbeddedBroker, create_topics

NAME = "latency"
EPS = 1.0
PAIRS = ("distribution_presence", "value_presence")
MARKER = "marker-user"
MARKER_EVERY = 0.5
BASE = len(DOMAIN)  # markers report BASE, BASE + 1, ...


def marker_thetas(values: list[float]) -> list[float]:
    """theta of the marker user after each of its reports (core.user_theta, independent path)."""
    out = []
    pairs = frozenset(PairKind(p) for p in PAIRS)
    for j in range(1, len(values) + 1):
        dist = Distribution.from_counts(values[:j], [1] * j)
        out.append(user_theta(dist, True, None, pairs, EPS, rule="exact").theta)
    return out


class LagSampler(threading.Thread):
    """Reads the worker's lag histogram _sum/_count every 0.2 s: one value per release.

    Releases come every release_period_seconds (1 s), so a poll nearly always sees at most one
    new observation and its exact value (sum delta); when it sees k > 1 it records their mean.
    """

    def __init__(self, worker: Worker) -> None:
        super().__init__(daemon=True)
        self.worker = worker
        self.values: list[tuple[float, float]] = []  # (poll time, lag seconds)
        self._stop_event = threading.Event()

    def _read(self) -> tuple[float, float]:
        s = self.worker.samples()
        return (s.get(("pufferfish_release_lag_seconds_sum", ()), 0.0),
                s.get(("pufferfish_release_lag_seconds_count", ()), 0.0))

    def run(self) -> None:
        total, count = self._read()
        while not self._stop_event.wait(0.2):
            new_total, new_count = self._read()
            k = int(new_count - count)
            if k > 0:
                lag = (new_total - total) / k
                self.values += [(time.perf_counter(), lag)] * k
            total, count = new_total, new_count

    def between(self, start: float, end: float) -> list[float]:
        return [lag for t, lag in self.values if start <= t <= end]

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


async def offer(
    bootstrap: str, topics: dict[str, str], work: Workload, rate: float, seconds: float,
    markers: list[float],
) -> tuple[int, list[float]]:
    """Background events at ``rate``/s for ``seconds`` plus one marker every MARKER_EVERY s.

    Returns (background events sent, send time of each marker).
    """
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    await producer.start()
    sent, pending = 0, []
    marker_times: list[float] = []
    try:
        start = time.perf_counter()
        next_marker = start
        while True:
            now = time.perf_counter()
            if now - start >= seconds:
                break
            due = int(rate * (now - start)) - sent
            for t, k, v in work.backlog(due):
                pending.append(await producer.send(topics[t], json.dumps(v).encode(),
                                                   key=k.encode()))
            sent += max(due, 0)
            if now >= next_marker and len(marker_times) < len(markers):
                value = markers[len(marker_times)]
                t_send = time.time()
                doc = {"user_id": MARKER, "value": value, "report_id": f"m{value:g}",
                       "ts": t_send}
                await producer.send_and_wait(topics["reports"], json.dumps(doc).encode(),
                                             key=MARKER.encode())
                marker_times.append(t_send)
                next_marker += MARKER_EVERY
            if len(pending) > 1000:
                await asyncio.gather(*pending)
                pending.clear()
            await asyncio.sleep(0.01)
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return sent, marker_times


async def read_releases(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    out = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 1.0:
            batch = await consumer.getmany(tp, timeout_ms=300)
            for rec in batch.get(tp, []):
                out.append(json.loads(rec.value))
                quiet_since = time.monotonic()
    finally:
        await consumer.stop()
    return out


def marker_latencies(
    releases: list[dict[str, Any]], thetas: list[float], sent: list[float], first: int
) -> list[float]:
    """Latency of markers first..first+len(sent)-1 (NaN if no release included one)."""
    out = []
    for i, t_send in enumerate(sent):
        j = first + i
        lower = thetas[j - 1] if j > 0 else 0.0
        threshold = (lower + thetas[j]) / 2
        hit = next((r["ts"] for r in releases if r["theta"] > threshold and r["ts"] >= t_send),
                   None)
        out.append(hit - t_send if hit is not None else float("nan"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = _common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0, help="duration of each load phase")
    p.add_argument("--capacity-events", type=int, default=10000)
    args = p.parse_args(argv)
    phase_seconds = 3.0 if args.quick else args.seconds
    cap_events = 300 if args.quick else args.capacity_events
    users = 40 if args.quick else 1000
    per_phase = int(phase_seconds / MARKER_EVERY) + 1
    loads = (("light", 0.05), ("saturating", 1.0))
    marker_values = [float(BASE + j) for j in range(per_phase * len(loads))]
    domain = list(DOMAIN) + marker_values
    thetas = marker_thetas(marker_values)
    background_cap = max(
        user_theta(Distribution.point(v), True, None, frozenset(PairKind(x) for x in PAIRS), EPS)
        .theta for v in DOMAIN
    )
    assert background_cap < thetas[0], "markers must out-rank every background user"

    started = time.perf_counter()
    tag = uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    rows, lag_rows = [], []
    try:
        with EmbeddedBroker(log_path=workdir / "tansu.log") as broker:
            topics = topic_names(tag)
            asyncio.run(create_topics(broker.bootstrap, {
                topics["reports"]: PARTITIONS, topics["membership"]: PARTITIONS}))
            work = Workload(users)
            joins = work.setup_joins() + [work.join(MARKER)]
            produce_sync(broker.bootstrap, topics, joins)
            worker = start_worker(broker, workdir, tag, domain=domain, pairs=list(PAIRS),
                                  epsilon=str(EPS))
            try:
                wait_for(worker, len(joins), 120, "the setup joins")
                produce_sync(broker.bootstrap, topics, work.setup_reports())
                done = len(joins) + len(work.churn)
                wait_for(worker, done, 60, "the setup reports")
                produce_sync(broker.bootstrap, topics, work.backlog(cap_events))
                samples = drain(worker, done, cap_events, timeout=200)
                capacity = rate_between(samples, done + 0.05 * cap_events,
                                        done + 0.95 * cap_events)
                done += cap_events
                time.sleep(2.5)  # let a release include the backlog's tail before phase 1
                sampler = LagSampler(worker)
                sampler.start()
                for i, (load, share) in enumerate(loads):
                    rate = max(capacity * share, 5.0)
                    t0 = time.perf_counter()
                    mk = marker_values[i * per_phase:(i + 1) * per_phase]
                    sent, marker_times = asyncio.run(
                        offer(broker.bootstrap, topics, work, rate, phase_seconds, mk))
                    done += sent + len(marker_times)
                    samples = drain(worker, 0, done, timeout=200)  # all handled
                    drained = samples[-1][0] - t0
                    achieved = (sent + len(marker_times)) / max(drained, 1e-9)
                    time.sleep(2.0)  # the next release tick includes the last marker
                    # a release in the phase's first 1.5 s holds no event of the phase yet
                    lags = sampler.between(t0 + 1.5, time.perf_counter())
                    releases = asyncio.run(read_releases(broker.bootstrap, topics["releases"]))
                    lat = marker_latencies(releases, thetas, marker_times, i * per_phase)
                    ok = [x for x in lat if x == x]
                    rows.append((load, rate, achieved, len(marker_times), len(ok),
                                 _common.percentile(ok, 50), _common.percentile(ok, 99),
                                 max(ok) if ok else float("nan")))
                    lag_rows.append((load, len(lags), _common.percentile(lags, 50),
                                     _common.percentile(lags, 99),
                                     max(lags) if lags else float("nan")))
                sampler.stop()
            finally:
                code = worker.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.perf_counter() - started

    headers = ("load", "offered ev/s", "achieved ev/s (incl. drain)", "markers",
               "markers released", "p50 s", "p99 s", "max s")
    lag_headers = ("load", "releases", "worker lag p50 s", "worker lag p99 s", "max s")
    print(f"release latency (report produced -> first release including it); worker capacity "
          f"{capacity:,.0f} ev/s measured in this run; release period 1 s")
    print(_common.text_table(headers, rows))
    print("\nworker pufferfish_release_lag_seconds per release (newest included event -> publish)")
    print(_common.text_table(lag_headers, lag_rows))
    print(f"worker exit code {code}; total {elapsed:.0f} s")
    body = (
        __doc__.split("\n", 1)[1].strip()
        + f"\n\nCapacity measured in this run: {capacity:,.0f} events/s ({cap_events} events "
        f"drained). {len(domain)}-value domain (16 background + markers), {users} users, "
        f"{phase_seconds:g} s per phase. Run time {elapsed:.0f} s.\n\n"
        + _common.markdown_table(headers, rows)
        + "\n\nThe worker's `pufferfish_release_lag_seconds`, one value per release, per phase:\n\n"
        + _common.markdown_table(lag_headers, lag_rows) + "\n"
    )
    _common.report(args, NAME, "5. Release latency", _common.command_line(NAME, argv), body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
