"""Release latency: time from a report's production to the first release that includes it.

Method (own measurement, exact inclusion): theta is public and constant for a configuration,
so inclusion is read from the noisy sum itself. The worker runs with epsilon = 1e6 per release
(budget 1e12), so the discrete Laplace noise is at most a few units (|noise| <= theta ln 1e9
except with probability 1e-9; theta = max|domain| / 1e6 here). Background users report
0..15, so their part of the sum lies in [0, 15 U]; a marker user reports strictly increasing
values v_j = (j + 1) S, with the step S a power of two above 4 (15 U + 1), so the sum's
S-block tells which marker value it holds: a release includes marker j iff its noisy_sum >=
v_j - the Laplace bound (the marker's events are processed in order, and the previous value
v_{j-1} plus every background user plus the bound stays below that). Latency of marker j =
``ts`` of the first such release (the worker's publish time, same host clock) - the time just
before the marker was sent. It therefore includes the wait for the next release tick
(release_period_seconds = 1 s, partials every 0.1 s): the floor is ~0.5 s on average by
design. Markers go out every 0.5 s. Pairs distribution_presence, rule exact, one group with
learned priors (uniform round-0 law, no learning round during the run).

Loads: the worker's capacity is measured first in the same run, twice. Draining a backlog of
100,000 events (5-95 %) gives its rate with nothing else running; then events offered at that
rate for half a phase give its *live* capacity, the rate it handles while the generator and
the broker's produce path share the two cores with it (read from 25 % of the offer to its end,
the batches full). On this 2-core machine the live rate is about half the backlog rate, and a
load relative to the backlog rate overloaded the worker: "half" was beyond what it could take
live, so a backlog and seconds of latency built up. Background events (the throughput
benchmark's mix: reports + 2 % join/leave churn; librdkafka producer, see bench/markers.py
``offer``) are then offered at 5 % (light), 50 % (half: the goal is p99 <= 2 s there) and
100 % (saturating) of the live capacity. The worker's consumer may wait 0.1 s for an idle
fetch (consumer_fetch_max_wait_seconds, the tansu setting; Faust's fixed 1.5 s added up to
1.5 s per topic hop). The worker's own ``pufferfish_release_lag_seconds`` (release publish
time - when a worker consumed the newest record the release includes, on the workers' clocks:
the lag of the *newest* record, a lower bound; no value for a release with nothing new) is
shown beside it: its _sum/_count are polled every 0.2 s, which yields each release's exact
value (releases are 1 s apart). Releases in the first 1.5 s of a phase are left out: they hold
no event of the phase yet.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench import _common
from bench.harness import DOMAIN, PARTITIONS, Worker, loadavg, topic_names, wait_for
from bench.markers import (
    MARKER,
    MARKER_EVERY,
    marker_latencies,
    marker_step,
    offer,
    read_releases,
    separable,
)
from bench.timing import drain, rate_between
from bench.worker_pipeline import start_worker
from bench.workload import Workload, produce_sync
from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics

NAME = "latency"
EPS = 1e6  # noise of a few units: the noisy sum shows which marker value it holds
PAIRS = ("distribution_presence",)
LAG_SERIES = ("pufferfish_release_lag_seconds_sum", "pufferfish_release_lag_seconds_count")


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
        s = self.worker.samples(LAG_SERIES)
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


def live_capacity(bootstrap: str, topics: dict[str, str], work: Workload, worker: Worker,
                  rate: float, seconds: float) -> tuple[float, int]:
    """The worker's handled rate while events are offered at ``rate`` (above what it can take)
    for ``seconds``: read between 25 % of the offer and its end, so the backlog is already
    large and the batches full. Returns (events/s, events sent)."""
    marks: list[tuple[float, float]] = []

    def mark_at(delay: float) -> None:
        time.sleep(delay)
        marks.append((time.perf_counter(), worker.handled()))

    timer = threading.Thread(target=mark_at, args=(0.25 * seconds,), daemon=True)
    timer.start()
    sent, _ = offer(bootstrap, topics, work, rate, seconds, [])
    end = (time.perf_counter(), worker.handled())
    timer.join()
    (t0, h0), (t1, h1) = marks[0], end
    return (h1 - h0) / max(t1 - t0, 1e-9), sent


def main(argv: list[str] | None = None) -> int:
    p = _common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0, help="duration of each load phase")
    p.add_argument("--capacity-events", type=int, default=100_000)
    args = p.parse_args(argv)
    phase_seconds = 3.0 if args.quick else args.seconds
    cap_events = 300 if args.quick else args.capacity_events
    users = 40 if args.quick else 1000
    per_phase = int(phase_seconds / MARKER_EVERY) + 1
    loads = (("light", 0.05), ("half", 0.5), ("saturating", 1.0))
    step = marker_step(users)
    background_max = max(DOMAIN) * users
    marker_values = [step * (j + 1) for j in range(per_phase * len(loads))]
    domain = list(DOMAIN) + marker_values
    # theta <= max|domain| / eps for every stream rule and pair used here
    assert separable(step, background_max, max(domain) / EPS), "marker step too small"

    load_before = loadavg()
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
                                  epsilon=str(EPS), budget_total="1e12")
            try:
                wait_for(worker, len(joins), 120, "the setup joins")
                produce_sync(broker.bootstrap, topics, work.setup_reports())
                done = len(joins) + len(work.churn)
                wait_for(worker, done, 60, "the setup reports")
                produce_sync(broker.bootstrap, topics, work.backlog(cap_events))
                samples = drain(worker, done, cap_events, timeout=200)
                backlog_rate = rate_between(samples, done + 0.05 * cap_events,
                                            done + 0.95 * cap_events)
                done += cap_events
                time.sleep(2.5)
                capacity, sent = live_capacity(broker.bootstrap, topics, work, worker,
                                               backlog_rate, max(phase_seconds / 2, 2.0))
                done += sent
                drain(worker, 0, done, timeout=200)
                time.sleep(2.5)  # let a release include the backlog's tail before phase 1
                thetas: set[float] = set()
                sampler = LagSampler(worker)
                sampler.start()
                for i, (load, share) in enumerate(loads):
                    rate = max(capacity * share, 5.0)
                    t0 = time.perf_counter()
                    mk = marker_values[i * per_phase:(i + 1) * per_phase]
                    sent, marker_times = offer(broker.bootstrap, topics, work, rate,
                                               phase_seconds, mk)
                    done += sent + len(marker_times)
                    samples = drain(worker, 0, done, timeout=200)  # all handled
                    drained = samples[-1][0] - t0
                    achieved = (sent + len(marker_times)) / max(drained, 1e-9)
                    time.sleep(2.0)  # the next release tick includes the last marker
                    # a release in the phase's first 1.5 s holds no event of the phase yet
                    lags = sampler.between(t0 + 1.5, time.perf_counter())
                    releases = asyncio.run(read_releases(broker.bootstrap, topics["releases"]))
                    thetas.update(r["theta"] for r in releases)
                    lat = marker_latencies(releases, marker_values, marker_times,
                                           i * per_phase)
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
    theta_text = ", ".join(f"{t:.6g}" for t in sorted(thetas)) or "none"
    exact = all(separable(step, background_max, t) for t in thetas)

    headers = ("load", "offered ev/s", "achieved ev/s (incl. drain)", "markers",
               "markers released", "p50 s", "p99 s", "max s")
    lag_headers = ("load", "releases", "worker lag p50 s", "worker lag p99 s", "max s")
    print(f"release latency (report produced -> first release including it); worker capacity "
          f"{capacity:,.0f} ev/s live, {backlog_rate:,.0f} ev/s draining a backlog (both "
          f"measured in this run); release period 1 s; load {load_before} before")
    print(_common.text_table(headers, rows))
    print("\nworker pufferfish_release_lag_seconds per release (newest record consumed -> "
          "publish)")
    print(_common.text_table(lag_headers, lag_rows))
    print(f"theta of the releases: {theta_text} (marker step {step:g}, background <= "
          f"{background_max:g}; inclusion exact: {'yes' if exact else 'NO'})")
    half = next(r for r in rows if r[0] == "half")
    goal = (f"p99 at 50 % of saturation <= 2 s: {'yes' if half[6] <= 2.0 else 'NO'} "
            f"({half[6]:.2f} s)")
    print(goal)
    print(f"worker exit code {code}; total {elapsed:.0f} s")
    body = (
        __doc__.split("\n", 1)[1].strip()
        + f"\n\nCapacity measured in this run: {capacity:,.0f} events/s live ({backlog_rate:,.0f} "
        f"events/s draining a backlog of {cap_events}). Load average {load_before} before, "
        f"{loadavg()} after. {len(domain)}-value domain (16 background + markers), {users} users, "
        f"{phase_seconds:g} s per phase; marker step S = {step:g}, background part <= "
        f"{background_max:g}; theta of every release: {theta_text} (inclusion exact: "
        f"{'yes' if exact else 'NO'}). Run time {elapsed:.0f} s. Goal: {goal}.\n\n"
        + _common.markdown_table(headers, rows)
        + "\n\nThe worker's `pufferfish_release_lag_seconds`, one value per release, per phase:\n\n"
        + _common.markdown_table(lag_headers, lag_rows) + "\n"
    )
    _common.report(args, NAME, "5. Release latency", _common.command_line(NAME, argv), body)
    return 0 if exact and thetas else 1


if __name__ == "__main__":
    raise SystemExit(main())
