"""Recovery at scale: a worker holding N users restarts (SIGTERM, or SIGKILL: a crash); how soon
it serves, counts a new report and releases again, how late its timers run meanwhile, its memory
and disk per user.

One worker, 4 input partitions, one input topic for reports and joins (auto_join: each user is
loaded by one report), exact rule, domain K = 6, one group, a release every second (so the
release tick adds at most 1 s to "next release"). Per (broker, store, N):

1. **load**: N reports (one per user, a confluent-kafka batch producer) into a fresh worker; the
   time from the first send to the worker having handled all N (``pufferfish_events_applied``).
   RSS of the worker before and after (``VmRSS``): RSS per user = (loaded - empty) / N.
2. **restart**: SIGTERM (a clean stop: RocksDB keeps each partition's aggregate beside its
   database) or SIGKILL (``--kill sigkill``: a crash, nothing kept, each partition's aggregate
   is rebuilt from its stored users), wait for the exit, disk of data_dir (RocksDB's tables)
   per user; one more report (a new user) is sent, then the worker is started again on the same
   data_dir:
   *restart -> /metrics* (the process's start to its metrics page), *-> counted* (its
   ``pufferfish_events_applied_total{kind="report"}`` reaches 1: the new report was applied,
   after the table's recovery and its partition's aggregate rebuild), *-> release* (its first
   ``pufferfish_releases_total``). RSS per user again once it released (the restored state).
3. **timers**, in the restarted worker's log until its first release: the worst *drift*, a
   timer woken late because the event loop ran something else (mode logs a timer of >= 1 s
   that woke up >= 10 % of its interval late: "woke up too late, with a drift of +X"), and the
   worst *overrun*, a timer's own run, its awaits included, longer than its interval ("is
   overlapping (interval=I runtime=R)": R - I; the first release tick reads the releases
   journal back, ``journal_quiet_seconds``). 0 when none was logged. *aggregate rebuild s*: the
   restarted worker's rebuilds from stored users (or the memory store's recovered users), summed
   over partitions, as it logs them ("rebuilt the aggregates of partitions ... in X s"); 0 when
   every aggregate came from its kept checkpoint.
4. **the public clock** (the release timer is the worker's own scheduler, not a mode timer, so
   3. does not see it): from the restart until the recovery is over and 2 s more, *ticks
   missed* (ticks from the restarted worker's first release to its newest without a release
   of their own; those due before its process started are the stop's gap, by design: late
   ticks are published late, never dropped, so 0) and the *worst tick lateness* (a release's
   ``ts`` minus its tick's due time: the ticks due while the worker starts are published late,
   at once, when its releaser is ready).

Brokers: noida-db (correct log-end offsets: Faust's recovery works with the default producer
batching), tansu (in memory; its ListOffsets defect needs ``producer_max_batch_size=1``, one
changelog record per produce request: slow at scale, so N is capped there, ``--tansu-max``) and
Apache Kafka 2.3.0 (``--brokers kafka``; tests/kafka_broker.py, unpacked by
``bash scripts/kafka-dist.sh``; none of tansu's workarounds).
SIGKILL rows are on tansu and Kafka only: noida-db 0.2.3 never expires the killed member, so the
restarted worker rejoins its group every session timeout and is never assigned (skipped, with a
line).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import _common, failover
from bench.harness import PARTITIONS, Worker, loadavg, start_pipeline
from bench.markers import read_releases
from bench.recovery_setup import (
    SETTINGS,
    Broker,
    produce_users,
    run_settings,
    run_topics,
    tear_down,
)
from stream_app.metrics_page import totals

NAME = "recovery"
HEADERS = ("broker", "store", "stop", "users", "load s", "load users/s", "RSS B/user loaded",
           "RSS B/user restored", "disk B/user", "restart -> /metrics s",
           "-> report counted s", "-> next release s", "worst timer drift s", "timer",
           "worst timer overrun s", "timer", "aggregate rebuild s", "ticks missed",
           "worst tick lateness s")
ROWS_MARK = re.compile(r"<!-- rows: (.*?) -->", re.DOTALL)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def wait(what: str, check: Callable[[], bool], worker: Worker, timeout: float,
         step: float = 0.1) -> float:
    """Seconds until `check()`; NaN after `timeout` (the row then shows n/a)."""
    t0 = time.monotonic()
    while not check():
        worker.check_alive()
        if time.monotonic() - t0 > timeout:
            print(f"  {what}: not within {timeout:g} s")
            return float("nan")
        time.sleep(step)
    return time.monotonic() - t0


def first_times(checks: dict[str, Callable[[], bool]], worker: Worker, timeout: float,
                since: float, step: float = 0.1) -> dict[str, float]:
    """Seconds from ``since`` (monotonic) to each check's first success, all polled together
    (one waited for after another would be timed from the end of the first wait); NaN after
    ``timeout``."""
    found: dict[str, float] = {}
    while len(found) < len(checks):
        worker.check_alive()
        for name, check in checks.items():
            if name not in found and check():
                found[name] = time.monotonic() - since
        if time.monotonic() - since > timeout:
            print(f"  {sorted(set(checks) - set(found))}: not within {timeout:g} s")
            break
        time.sleep(step)
    return {name: found.get(name, float("nan")) for name in checks}


LATE = re.compile(r"Timer (\S+) woke up too late, with a drift of \+([0-9.]+)")
OVERLAP = re.compile(r"Timer (\S+) is overlapping \(interval=([0-9.]+) runtime=([0-9.]+)\)")


def public_clock(releases: list[dict[str, Any]], started: float, until: float,
                 period: float) -> tuple[int, float]:
    """(ticks missed, the worst lateness) of the public clock from the restart (``started``,
    wall clock) until the recovery is over (``until``): every tick from the first published by
    the restarted worker (the first due after its process started: those due before are the
    stop's gap) to the newest must have a release (a late one is published late), and its
    lateness is its ``ts`` minus its due time."""
    mine = [r for r in releases if r.get("tick") is not None and started <= r["ts"] <= until]
    if not mine:
        return 0, float("nan")
    published = {int(r["tick"]) for r in mine}
    missed = sum(1 for k in range(min(published), max(published) + 1) if k not in published)
    return missed, max(r["ts"] - r["tick"] * period for r in mine)


def worst_lateness(log: str) -> tuple[float, str, float, str]:
    """(worst drift, its timer, worst overrun, its timer) logged; 0 and "-" when none was.
    A drift is the event loop waking a timer late (it ran something else meanwhile); an
    overrun is a timer's own run (its awaits included) lasting longer than its interval."""
    drift, drift_timer, over, over_timer = 0.0, "-", 0.0, "-"
    for m in LATE.finditer(log):
        if float(m.group(2)) > drift:
            drift, drift_timer = float(m.group(2)), m.group(1)
    for m in OVERLAP.finditer(log):
        late = float(m.group(3)) - float(m.group(2))
        if late > over:
            over, over_timer = late, m.group(1)
    return drift, drift_timer, over, over_timer


REBUILT = re.compile(
    r"rebuilt the aggregates of partitions \[([0-9, ]*)\] from (.+?) \(\d+\) in ([0-9.]+) s")


def aggregate_rebuilds(log: str) -> tuple[set[int], float]:
    """(partitions whose aggregate is there, seconds spent rebuilding from users): a checkpoint
    kept at a clean stop costs no rebuild."""
    partitions: set[int] = set()
    seconds = 0.0
    for m in REBUILT.finditer(log):
        partitions |= {int(p) for p in m.group(1).split(",") if p.strip()}
        if m.group(2) != "its checkpoint":
            seconds += float(m.group(3))
    return partitions, seconds


def measure(kind: str, store: str, n: int, timeout: float, keep: Path | None = None,
            stop: str = "SIGTERM") -> list[object]:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-recovery-{kind}-{store}-"))
    broker = Broker(kind, workdir)
    tag = f"rec{uuid.uuid4().hex[:6]}"
    topic, outputs = run_topics(tag)
    worker: Worker | None = None
    try:
        settings = run_settings(kind, broker.bootstrap, topic, outputs, store=f"{store}://")
        worker = start_pipeline(broker.impl, workdir, tag, ("-m", "stream_app", "run"),
                                **settings)
        empty = rss_bytes(worker.proc.pid)
        t0 = time.monotonic()
        produce_users(broker.bootstrap, topic, 0, n, seed=n)
        handled = wait("load", lambda: worker.handled() >= n, worker, timeout)  # type: ignore[union-attr]
        load = time.monotonic() - t0 if handled == handled else float("nan")
        time.sleep(2.0)  # the last changelog window is flushed (changelog_flush_seconds)
        loaded = rss_bytes(worker.proc.pid)
        if stop == "SIGKILL":
            os.kill(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait(timeout=30)
        else:
            worker.stop(timeout=120)
        disk = disk_bytes(workdir / "data-0") if store == "rocksdb" else float("nan")

        produce_users(broker.bootstrap, topic, n, 1, seed=n + 1)  # the report after the restart
        log_at = worker.log_path.stat().st_size
        started, started_wall = time.monotonic(), time.time()
        worker = start_pipeline(broker.impl, workdir, tag, ("-m", "stream_app", "run"),
                                **settings)
        to_metrics = time.monotonic() - started
        w = worker

        def total(name: str, labels: dict[str, str] | None = None) -> float:
            samples = w.samples((name,))
            return sum(v for (sample, lab), v in samples.items() if sample == name
                       and all(dict(lab).get(k) == x for k, x in (labels or {}).items()))

        seen = first_times({
            "counted": lambda: total("pufferfish_events_applied_total", {"kind": "report"}) >= 1,
            "release": lambda: totals(w.samples(("pufferfish_releases_total",))).get(
                "pufferfish_releases_total", 0) >= 1,
        }, w, timeout, started)
        counted, released = seen["counted"], seen["release"]
        restored = rss_bytes(w.proc.pid)
        with open(w.log_path, "rb") as f:
            f.seek(log_at)
            timers = worst_lateness(f.read().decode(errors="replace"))

        def rebuilds() -> tuple[set[int], float]:
            with open(w.log_path, "rb") as f:
                f.seek(log_at)
                return aggregate_rebuilds(f.read().decode(errors="replace"))

        wait("rebuilds", lambda: len(rebuilds()[0]) >= PARTITIONS, w, timeout)
        time.sleep(2.0)  # a tick or two after the recovery
        ticks = public_clock(
            asyncio.run(read_releases(broker.bootstrap, outputs["releases"])), started_wall,
            time.time(), float(SETTINGS["release_period_seconds"]))
        return [kind, store, stop, n, load, n / load, (loaded - empty) / n,
                (restored - empty) / n, disk / n, to_metrics, counted, released, *timers,
                rebuilds()[1], *ticks]
    finally:
        if worker is not None:
            worker.stop(timeout=60)
        tear_down(broker, workdir, keep, f"{kind}-{store}-{n}")


def older_release(*figures: object) -> object:
    """The restart -> release of a row measured before 2026-11-28 04:10 UTC, when the bench
    waited for the release only once the report was counted and added that wait to restart ->
    /metrics: a release seen at once had come before the count (between the two: a range),
    otherwise it came that long after the count."""
    to_metrics, counted, released = (float(str(f)) for f in figures)
    after = released - to_metrics
    if after < 0.2:
        return f"{_common.fmt(to_metrics)}-{_common.fmt(counted)} (a)"
    return f"{_common.fmt(counted + after)} (a)"


def merged(path: Path, rows: list[list[object]]) -> list[list[object]]:
    """This run's rows over those of earlier runs in the section (same broker, store, N)."""
    old: list[list[object]] = []
    if path.exists():
        m = ROWS_MARK.search(path.read_text(encoding="utf-8"))
        if m:
            old = json.loads(m.group(1))
    # rows from before the stop and rebuild columns: SIGTERM, rebuild not measured, release
    # fixed; rows from before the tick columns: not measured
    before_ticks = len(HEADERS) - 2
    old = [[*r[:2], "SIGTERM", *r[2:10], older_release(*r[8:11]), *r[11:], "n/a"]
           if len(r) == before_ticks - 2 else r for r in old]
    old = [[*r, "n/a", "n/a"] if len(r) == before_ticks else r for r in old]
    old = [r for r in old if len(r) == len(HEADERS)]  # (rows of other columns: dropped)
    keyed = {tuple(r[:4]): r for r in old}
    keyed.update({tuple(r[:4]): r for r in rows})
    order = {"kafka": 0, "noida": 1, "tansu": 2}
    return sorted(keyed.values(), key=lambda r: (order.get(str(r[0]), 2), float(str(r[3])),
                                                 str(r[1]), str(r[2])))


def main(argv: Sequence[str] | None = None) -> int:
    p = _common.parser(NAME, __doc__.split("\n\n")[0] if __doc__ else NAME)
    p.add_argument("--users", type=float, nargs="+", default=[1e5, 1e6])
    p.add_argument("--brokers", nargs="+", default=["noida", "tansu"],
                   choices=["kafka", "noida", "tansu"])
    p.add_argument("--stores", nargs="+", default=["rocksdb", "memory"],
                   choices=["rocksdb", "memory"])
    p.add_argument("--tansu-max", type=float, default=1e5,
                   help="largest N on tansu (one-record changelog batches)")
    p.add_argument("--kill", nargs="+", default=["sigterm"], choices=["sigterm", "sigkill"],
                   help="how the worker is stopped before its restart (sigkill: a crash)")
    p.add_argument("--timeout", type=float, default=900.0, help="bound of each wait, s")
    p.add_argument("--keep-logs", type=Path, help="copy the worker and broker logs here")
    p.add_argument("--failover", type=float, metavar="N",
                   help="instead: two workers with standby replicas and N users, the release "
                   "owner SIGKILLed (bench/failover.py)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="--failover: worker settings over the bench's (e.g. "
                   "broker_heartbeat_interval=0.5)")
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.failover:
        return failover.run(args, argv, int(args.failover))
    sizes = [500] if args.quick else [int(u) for u in args.users]
    load_before = loadavg()
    rows = []
    for kind in args.brokers:
        for n in sizes:
            if kind == "tansu" and n > args.tansu_max:
                continue
            for store in args.stores:
                for stop in (k.upper() for k in args.kill):
                    if kind == "noida" and stop == "SIGKILL":
                        print(f"{kind} {store} {stop} N={n:,}: skipped (noida-db 0.2.3 never "
                              "expires the killed member: the restarted worker rejoins its "
                              "group every 6 s and is never assigned; bench/RESULTS.md)")
                        continue
                    print(f"{kind} {store} {stop} N={n:,} (load {loadavg()})", flush=True)
                    row = measure(kind, store, n, args.timeout, args.keep_logs, stop)
                    print("  " + ", ".join(f"{h}={_common.fmt(v)}"
                                           for h, v in zip(HEADERS, row, strict=True)),
                          flush=True)
                    rows.append(row)
    load_after = loadavg()
    print(_common.text_table(HEADERS, rows))
    command = _common.command_line(NAME, argv)
    all_rows = merged(args.results, rows) if not args.quick else rows
    body = (
        f"{__doc__.split(chr(10) * 2, 1)[1].strip() if __doc__ else ''}\n\n"
        f"Load average (1, 5, 15 min) of the last run: before {load_before}, after "
        f"{load_after}; os.cpu_count() {os.cpu_count()}. Rows of earlier runs are kept "
        "(each row's own run is the command that listed its broker, store, stop and N). (a): a "
        "row measured before 2026-11-28 04:10 UTC, when the bench timed the release from the "
        "end of the count's wait; its release is corrected from its recorded figures (a range: "
        "the release came before the count, no closer figure was recorded).\n\n"
        f"{_common.markdown_table(HEADERS, all_rows)}\n\n"
        f"<!-- rows: {json.dumps(all_rows)} -->"
    )
    _common.report(args, NAME, "Recovery at scale (restart, rebuild, timers, memory)",
                   command, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
