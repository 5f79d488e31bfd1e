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
- with ``--store rocksdb``: the 1-process worker on the RocksDB table store too (``w1-rocksdb``;
  its ratio to raw and to the memory store's in the goals line);
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
marks; "of which input path" is the part of the worker's that its batch engine took
(``pufferfish_input_cpu_seconds_total``: the thread CPU time of ``Ingest.handle_batch``; what
is left is Faust, the consumer, the writes, the releases and the metrics, to set against the
recipe's whole CPU); broker CPU the same for the broker process (it shares the 2 cores: a
pipeline that writes more, e.g. larger changelog values, also costs the broker more). Goals:
the worker
at 1 process >= 0.18x raw (>= 0.38x the aim of the inline hand-off) and >= 0.9x the recipe,
>= 1.3x the stock Faust recipe; 2 processes >= 0.28x raw. The consumer's idle-fetch
wait is 0.1 s (tansu; stock Faust keeps its hard-coded 1.5 s, which a backlog's fetches do not
wait for). A further backlog of M/2 events can be profiled with py-spy attached to one
pipeline's process (``--profile [PIPELINE]``).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import _common, profiler, worker_pipeline
from bench.harness import PARTITIONS, loadavg
from bench.profiler import Hook, Profile, profile_worker
from bench.raw_loop import raw_pass
from bench.runs import RUN_NAMES, STORES, Run, all_runs, run_pipeline
from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics

NAME = "throughput"


@dataclass
class Measured:
    """What a run measured besides its pipelines' rates (those are in their Run)."""

    raw_passes: list[tuple[int, float]] = field(default_factory=list)  # (records, seconds)
    profile: Profile | None = None
    elapsed: float = 0.0
    load_before: str = "n/a"
    load_after: str = "n/a"


def measure(args: argparse.Namespace, runs: list[Run], users: int, m: int, passes: int,
            out: Measured) -> None:
    """Every pipeline ``passes`` times in turn on one broker; the raw loop over the input
    topics of the first 1-process worker pass (or of the first pass of the last pipeline)
    right after it, and once more at the end."""
    tag = uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    raw_out = f"raw-out-{tag}"
    try:
        with EmbeddedBroker(log_path=workdir / "tansu.log") as broker:
            raw_topics: dict[str, str] | None = None
            raw_total = 0
            for run, pass_no in [(r, k) for k in range(passes) for r in runs]:
                hook: Hook | None = None
                found: list[Profile] = []
                if run.name == args.profile and pass_no == 0:
                    hook, found = profile_worker(workdir, broker, m, args.quick,
                                                 args.profile_out, args.profile_rate)
                topics, produced = run_pipeline(broker, workdir, f"{tag}{run.name}{pass_no}",
                                                run, users, m, profile=hook)
                if found:
                    out.profile = found[0]
                if raw_topics is None and (run.name == "w1" or run is runs[-1]):
                    raw_topics, raw_total = topics, produced
                    asyncio.run(create_topics(broker.bootstrap, {raw_out: PARTITIONS}))
                    out.raw_passes.append(raw_pass(broker.bootstrap, topics, raw_total, raw_out))
            assert raw_topics is not None
            out.raw_passes.append(raw_pass(broker.bootstrap, raw_topics, raw_total, raw_out))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def write_up(args: argparse.Namespace, argv: Sequence[str] | None, runs: list[Run],
             users: int, m: int, got: Measured) -> None:
    """Print the table, ratios and goals; write them to the results (unless --no-write)."""
    raw_rates = [n / seconds for n, seconds in got.raw_passes]
    raw_rate = sum(raw_rates) / len(raw_rates)
    by = {r.name: r for r in all_runs()}  # a pipeline left out (--pipelines): NaN
    by.update({r.name: r for r in runs})
    recipe, stock = by["recipe"].rate, by["stock-recipe"].rate
    raw_text = ", ".join(
        f"{n} records at {r:,.0f}/s" for (n, _), r in zip(got.raw_passes, raw_rates, strict=True)
    )
    headers = ("pipeline", "processes", "events", "events/s", "ratio to raw",
               "ratio to recipe", "ratio to stock Faust recipe",
               "CPU us/event", "of which input path", "broker CPU us/event")
    nan = float("nan")
    rows: list[tuple[object, ...]] = [
        ("raw aiokafka consume->produce (mean of 2 passes)", 1, got.raw_passes[0][0], raw_rate,
         1.0, nan, nan, nan, nan, nan),
    ]
    for r in runs:
        worker = r.name.startswith("w")
        rows.append((r.label, r.processes, r.events, r.rate, r.rate / raw_rate,
                     r.rate / recipe if worker else nan, r.rate / stock, r.cpu_us,
                     r.input_cpu_us if worker else nan, r.broker_cpu_us))
    w1, w2 = by["w1"], by["w2"]
    goals = [
        ("worker, 1 process >= 0.18x raw", w1.rate / raw_rate >= 0.18),
        ("worker, 1 process >= 0.38x raw", w1.rate / raw_rate >= 0.38),
        ("worker, 1 process >= 0.9x recipe", w1.rate / recipe >= 0.9),
        ("worker, 1 process >= 1.3x stock Faust recipe", w1.rate / stock >= 1.3),
        ("worker, 2 processes >= 0.28x raw", w2.rate / raw_rate >= 0.28),
    ]
    goal_text = "; ".join(f"{g}: {'yes' if ok else 'NO'}" for g, ok in goals)
    goal_text += "".join(f"; {r.label}: {r.rate / raw_rate:.3f}x raw, {r.rate / w1.rate:.3f}x "
                         "the memory store" for r in runs if r.settings.get("store"))
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
          f"per pipeline; load average before {got.load_before}, after {got.load_after}")
    print(_common.text_table(headers, rows))
    print(f"raw loop passes: {raw_text}")
    print(f"worker releases: {w1.releases:.0f} (1 process), {w2.releases:.0f} (2); rejected "
          f"records: {w1.rejected:.0f}, {w2.rejected:.0f}; exit codes: {codes}")
    print(stock_text)
    print(f"per pass: {per_pass or 'n/a'}")
    print(f"{goal_text}; total {got.elapsed:.0f} s")
    prof_md = ""
    if got.profile is not None:
        prof_md = profiler.report(got.profile, args.profile, args.profile_rate, m)
    run_notes = (
        f"Load average (1, 5, 15 min) before the run: {got.load_before}; after: "
        f"{got.load_after}. Worker settings: {worker_pipeline.settings_text()}; the recipe uses "
        f"the same Faust settings. Users {users}, backlog M = {m} per pipeline. Raw loop passes: "
        f"{raw_text}. Worker releases: {w1.releases:.0f} (1 process), {w2.releases:.0f} "
        f"(2 processes); rejected records {w1.rejected:.0f}, {w2.rejected:.0f}. "
        f"Run time {got.elapsed:.0f} s."
    )
    body = (
        __doc__.split("\n", 1)[1].strip() + "\n\n" + run_notes + "\n\n"
        + _common.markdown_table(headers, rows)
        + f"\n\n**Ratio worker / raw = {w1.rate / raw_rate:.3f}** (1 process), "
        f"{w2.rate / raw_rate:.3f} (2 processes); worker / recipe = {w1.rate / recipe:.2f}; "
        f"**{stock_text}**."
        + f" Per pass: {per_pass or 'n/a'}. Goals: {goal_text}."
        + prof_md + "\n"
    )
    _common.report(args, NAME, "1. End-to-end throughput vs a raw aiokafka loop",
                   _common.command_line(NAME, argv), body)


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
    p.add_argument("--store", action="append", choices=STORES, default=[],
                   help="also the 1-process worker on this table store (w1-STORE)")
    p.add_argument("--passes", type=int, default=2,
                   help="run every pipeline this many times, in turn (rates: the mean)")
    args = p.parse_args(argv)
    unknown = set(args.pipelines or ()) - set(RUN_NAMES)
    if unknown:
        p.error(f"unknown pipelines {sorted(unknown)}; choose from {', '.join(RUN_NAMES)}")
    users, m = (40, 400) if args.quick else (args.users, args.events)
    passes = 1 if args.quick else max(1, args.passes)
    runs = all_runs(STORES if args.pipelines else args.store)  # (--pipelines may name one)
    if args.pipelines:
        runs = [r for r in runs if r.name in args.pipelines]
        args.no_write = True
    started = time.perf_counter()
    got = Measured(load_before=loadavg())
    measure(args, runs, users, m, passes, got)
    got.elapsed = time.perf_counter() - started
    got.load_after = loadavg()
    write_up(args, argv, runs, users, m, got)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
