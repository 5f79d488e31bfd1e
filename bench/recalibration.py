"""What replaced per-event recalibration: the public release plan, and the per-event ingest cost.

theta no longer depends on who joined or what anyone reported: it is computed from the public
group laws only (``core.plan.release_plan``: the max over every configured group and pair of
the ``core.policy.calibrate`` table), once at start-up and once per learning round. Part 1
times that call against the number of configured groups G and the domain size K, per stream
rule; part 2 times the per-event path that remains
(``stream_app.domain.ingest.Ingest.handle_batch``: parse, validate, deduplicate, update the
user's state and its partition's sums), which must not grow with the number of users N.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from bench import _common
from pufferfish_core.distribution import Distribution
from pufferfish_core.plan import release_plan
from pufferfish_core.vocabulary import STREAM_RULES, PairKind, Rule
from stream_app.domain.batch import Record
from stream_app.domain.ingest import Ingest
from stream_app.domain.rules import EventRules
from stream_app.domain.state import UserState
from stream_app.faust_adapter.user_table import UserTable
from stream_app.kafka.partitioning import partition_for
from stream_app.metrics import Metrics
from stream_app.settings import Settings

NAME = "recalibration"
EPS = 0.5
GRID_LOG2 = -10
PARTITIONS = 4
BATCH = 1000  # the worker's BATCH_MAX_EVENTS (stream_app.faust_adapter.worker)
GROUP = "default"


# --- part 1: the release plan ----------------------------------------------------------------
def random_laws(g: int, k: int, rng: np.random.Generator) -> dict[str, Distribution]:
    """G group laws on the domain {0, ..., K-1}, each from random integer counts in [1, 100]."""
    domain = [float(v) for v in range(k)]
    return {
        f"g{i}": Distribution.from_counts(domain, rng.integers(1, 101, size=k).tolist())
        for i in range(g)
    }


def plan_pairs(g: int) -> tuple[PairKind, ...]:
    """distribution_presence, plus distribution_change once there is another group."""
    if g < 2:
        return (PairKind.DISTRIBUTION_PRESENCE,)
    return (PairKind.DISTRIBUTION_PRESENCE, PairKind.DISTRIBUTION_CHANGE)


def time_plan(
    g: int, k: int, rule: Rule, repeats: int, seconds: float, seed: int
) -> tuple[list[float], float]:
    """Seconds per ``release_plan`` call, fresh laws each call (nothing cached across calls);
    stops after ``repeats`` calls or ``seconds`` (at least one). Also the last theta."""
    rng = np.random.default_rng(seed)
    pairs = plan_pairs(g)
    times: list[float] = []
    theta = float("nan")
    started = time.perf_counter()
    while len(times) < repeats and (not times or time.perf_counter() - started < seconds):
        laws = random_laws(g, k, rng)
        t0 = time.process_time()
        plan = release_plan(laws, pairs, rule, EPS, GRID_LOG2)
        times.append(time.process_time() - t0)
        theta = plan.theta
    return times, theta


# --- part 2: the per-event ingest path -------------------------------------------------------
class DictTable(UserTable):
    """The worker's users table on a plain dict, as on the memory store (no partition database
    to pick from the current event); the changelog writes it queues are dropped per batch."""

    def __init__(self) -> None:
        super().__init__(SimpleNamespace(data={}))

    def _set_event(self, event: Any) -> None:
        pass


def partition_of(user_id: str) -> int:
    """The partitioning contract (stream_app.kafka.partitioning): murmur2(user_id) mod N."""
    return partition_for(user_id.encode(), PARTITIONS)


def build_ingest(n: int, k: int, seed: int) -> tuple[Ingest, DictTable, Settings]:
    """N present users of the one configured group, each with a random histogram over K values
    (as after a table recovery), and their partition aggregates."""
    domain = tuple(float(v) for v in range(k))
    settings = Settings(domain=domain, input_partitions=PARTITIONS, grid_log2=GRID_LOG2,
                        metrics_port=None)
    rules = EventRules(domain=domain, grid_log2=settings.grid_log2,
                       dedup_window=settings.dedup_window, auto_join=False,
                       known_groups=frozenset({GROUP}), default_group=GROUP)
    store = DictTable()
    rng = np.random.default_rng(seed)
    unit = 2 ** -GRID_LOG2
    for i in range(n):
        uid = f"user-{i:07d}"
        counts = tuple(int(c) for c in rng.multinomial(2 * k, np.ones(k) / k))
        store.users.data[uid] = UserState(
            partition=partition_of(uid), present=True, group=GROUP,
            value_units=int(rng.integers(0, k)) * unit, value_ts=1.0, counts=counts,
        ).to_bytes()
    for p in range(PARTITIONS):
        store.aggregate(p)
    return Ingest(settings, rules, Metrics.create(), store), store, settings


def make_batches(
    n: int, k: int, events: int, settings: Settings, seed: int
) -> list[list[Record]]:
    """Batches of BATCH records: 98 % reports by random users, 2 % leave/join churn (a
    report drawn for a user who left becomes that user's join: every record is valid)."""
    rng = np.random.default_rng(seed)
    present: dict[str, bool] = {}
    records: list[Record] = []
    ts = 2.0
    for j in range(events):
        uid = f"user-{int(rng.integers(0, n)):07d}"
        ts += 1e-3
        joined = present.get(uid, True)
        if rng.random() < 0.02 or not joined:
            present[uid] = not joined
            doc: dict[str, Any] = {"user_id": uid, "event": "leave" if joined else "join",
                                   "ts": ts}
            topic = settings.topic_membership
        else:
            doc = {"user_id": uid, "value": float(rng.integers(0, k)), "report_id": f"r{j}",
                   "ts": ts}
            topic = settings.topic_reports
        records.append(Record(topic, partition_of(uid), uid.encode(), json.dumps(doc).encode()))
    return [records[i:i + BATCH] for i in range(0, len(records), BATCH)]


def time_ingest(n: int, k: int, events: int, seed: int) -> tuple[list[float], int, int, float]:
    """Events/s of each batch through ``Ingest.handle_batch``; also the dead letters, the
    number of batches and the mean number of distinct users per batch."""
    ingest, store, settings = build_ingest(n, k, seed)
    batches = make_batches(n, k, events, settings, seed + 1)
    rates, letters = [], 0
    for batch in batches:
        t0 = time.process_time()
        letters += len(ingest.handle_batch(batch))
        rates.append(len(batch) / max(time.process_time() - t0, 1e-9))
        store.take_writes()
    distinct = [len({r.message.key for r in batch}) for batch in batches]
    return rates, letters, len(batches), sum(distinct) / len(distinct)


def fmt_n(n: int) -> object:
    return f"{n:.0e}" if n >= 1000 else n


# --- the benchmark ---------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    p = _common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, help="release_plan calls per cell, max (20; quick 3)")
    p.add_argument("--cell-seconds", type=float, default=3.0, help="time cap per plan cell")
    p.add_argument("--events", type=int, help="ingest events per (N, K) cell (20000; quick 2000)")
    args = p.parse_args(list(argv) if argv is not None else None)
    gs = (1, 2) if args.quick else (1, 2, 4, 8)
    ks = (4, 16) if args.quick else (4, 16, 64)
    ns = (100, 1000) if args.quick else (10**3, 10**4)
    ingest_ks = (16,) if args.quick else (4, 16, 64)
    repeats = args.repeats or (3 if args.quick else 20)
    events = args.events or (2 * BATCH if args.quick else 20 * BATCH)
    started = time.perf_counter()

    plan_rows = []
    for rule in STREAM_RULES:
        for k in ks:
            for g in gs:
                times, theta = time_plan(g, k, rule, repeats, args.cell_seconds,
                                         seed=1000 * g + k)
                calibrations = g + g * (g - 1)  # (P_g, delta_0) + (P_g, P_h), h != g
                plan_rows.append((
                    rule.value, k, g, "+".join(("presence", "change")[: len(plan_pairs(g))]),
                    calibrations, len(times), _common.percentile(times, 50) * 1e3,
                    min(times) * 1e3, _common.percentile(times, 50) / calibrations * 1e3, theta,
                ))

    ingest_rows = []
    gc.freeze()  # the stores are long-lived: keep the collector off them while timing
    for k in ingest_ks:
        cells = {n: time_ingest(n, k, events, seed=n + k) for n in ns}
        p50 = {n: _common.percentile(cell[0], 50) for n, cell in cells.items()}
        for n, (rates, letters, batches, distinct) in cells.items():
            ingest_rows.append((
                fmt_n(n), k, events, batches, distinct, letters, p50[n],
                _common.percentile(rates, 5), 1e6 / p50[n], p50[n] / p50[ns[0]],
            ))
    gc.unfreeze()
    elapsed = time.perf_counter() - started

    plan_headers = ("rule", "K", "G", "pairs", "calibrations", "calls", "plan p50 ms",
                    "plan min ms", "ms per calibration (p50)", "theta (last call)")
    ingest_headers = ("N users", "K", "events", "batches", "users per batch", "dead letters",
                      "events/s p50 (per batch)", "events/s p5", "us/event p50",
                      f"p50 / p50(N={fmt_n(ns[0])})")
    print(f"release_plan CPU time (eps {EPS}, random integer laws on {{0..K-1}}, fresh laws "
          "each call)")
    print(_common.text_table(plan_headers, plan_rows))
    print(f"\nIngest.handle_batch, batches of {BATCH} (98 % reports, 2 % join/leave), "
          "CPU time; nothing is recalibrated per event")
    print(_common.text_table(ingest_headers, ingest_rows))
    print(f"\ntotal {elapsed:.0f} s")

    note = (
        "**Part 1: the public release plan.** `core.plan.release_plan(laws, pairs, rule, "
        f"eps={EPS})` for G configured groups, each with a random law from integer counts "
        "in [1, 100] on the domain {0..K-1} (seeded; fresh laws for every call, so no "
        "`Distribution` cache is reused). Pairs: `distribution_presence` for G = 1, plus "
        "`distribution_change` for G >= 2, i.e. G + G(G-1) calibrations per call. CPU time "
        "(`time.process_time`) per call; a cell stops after "
        f"{args.cell_seconds:g} s (see *calls*). The worker makes this call at start-up and "
        "after each learning round (metric `pufferfish_recalibration_seconds`), never per "
        "event.\n\n"
        "**Part 2: the per-event path.** `stream_app.domain.ingest.Ingest.handle_batch` on batches "
        f"of {BATCH} records (the worker's batch bound) with an in-memory store that keeps "
        "`UserState.to_bytes()` per user and decodes it on every read (as the worker's "
        "memory table does; Faust itself and the broker are not included: see the throughput "
        "section). N present users of one group, each with a random histogram (2K reports) "
        f"over K values, {PARTITIONS} partitions; 98 % reports by random users, 2 % "
        "leave/join churn. Events/s per batch from CPU time; the last column is the p50 "
        f"rate over the one at N = {fmt_n(ns[0])} for the same K (1.0 = flat in N). A user's "
        "records in one batch are applied to one working copy that is read and written once "
        "(and its partition sums updated once), so the cost follows the *users per batch* "
        "(distinct users among a batch's records) more than the events: with N much smaller "
        "than the batch, many records share a user and the batch is cheaper. "
        f"Run time {elapsed:.0f} s."
    )
    body = (
        __doc__.split("\n", 1)[1].strip() + "\n\n" + note
        + "\n\n**Release plan time vs G and K**\n\n"
        + _common.markdown_table(plan_headers, plan_rows)
        + "\n\n**Per-event ingest cost vs N (flatness in N)**\n\n"
        + _common.markdown_table(ingest_headers, ingest_rows) + "\n"
    )
    _common.report(args, NAME, "2. Release plan cost vs G and K; per-event ingest cost vs N",
                   _common.command_line(NAME, argv), body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
