"""Recalibration cost per report vs N users and domain size K, for each rule.

Incremental update (what the worker does per event, stream_app.app.PufferfishApp.handle):
the user's estimate from their counts -> core.user_theta -> stream_app.state.recalibrated ->
PartitionAggregate.apply (the lazy-deletion max heaps) -> read the new max theta. The worker's
LRU cache in front of user_theta is bypassed (every timed update is a cache miss, the worst case).

Full recompute (the alternative the incremental design avoids): user_theta for every user, then
core.user_theta.set_theta. It is timed on a sample of users and extrapolated linearly to N.

Every N shares the same update inputs, and the N values are timed in interleaved chunks so a
noisy neighbour on the machine hits them alike.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence

import numpy as np

from bench import _common
from core.distribution import Distribution
from core.user_theta import RULES, PairKind, UserCalibration, set_theta, user_theta
from stream_app.state import Calibrate, PartitionAggregate, UserState, recalibrated

NAME = "recalibration"
EPS = 0.5
PAIRS = frozenset({PairKind.DISTRIBUTION_PRESENCE})
CHUNK = 50


class Workload:
    """Random user histograms over the domain {0, ..., K-1} (about 2K reports per user)."""

    def __init__(self, k: int, count: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.domain = tuple(float(v) for v in range(k))
        self.counts = [
            tuple(int(c) for c in rng.multinomial(2 * k, rng.dirichlet(np.ones(k))))
            for _ in range(count)
        ]

    def calibrator(self, rule: str) -> Calibrate:
        domain = self.domain

        def calibrate(state: UserState) -> tuple[float, float, str | None]:
            pts = [(v, c) for v, c in zip(domain, state.counts, strict=True) if c > 0]
            dist = Distribution.from_counts([v for v, _ in pts], [c for _, c in pts])
            cal = user_theta(dist, state.present, state.group, PAIRS, EPS, rule=rule)
            binding = cal.binding_pair.value if cal.binding_pair is not None else None
            return cal.theta, cal.spread, binding

        return calibrate


def build_aggregate(n: int, seed: int) -> PartitionAggregate:
    """N users already in the max structure (random thetas), as after a table recovery."""
    rng = np.random.default_rng(seed)
    thetas = rng.uniform(1.0, 100.0, size=n).tolist()
    agg = PartitionAggregate(partition=0)
    for i, theta in enumerate(thetas):
        agg.apply(f"u{i}", None, UserState(partition=0, present=True, value_units=1, theta=theta))
    return agg


def time_updates(
    agg: PartitionAggregate, states: Sequence[UserState], calibrate: Calibrate,
    users: Sequence[str],
) -> tuple[list[float], list[float]]:
    """Per update: (total seconds, seconds spent in the max structure only)."""
    total, structure = [], []
    clock = time.perf_counter
    for state, user in zip(states, users, strict=True):
        t0 = clock()
        new = recalibrated(state, calibrate)
        t1 = clock()
        agg.apply(user, state, new)
        _ = agg.theta
        t2 = clock()
        total.append(t2 - t0)
        structure.append(t2 - t1)
    return total, structure


def full_recompute_per_user(states: Sequence[UserState], calibrate: Calibrate) -> float:
    """Seconds per user: median user_theta time over a sample + the set_theta max per user.

    The median (not the mean) keeps a neighbour's CPU burst out of the extrapolation.
    """
    clock = time.perf_counter
    calibs: dict[str, UserCalibration] = {}
    per_call = []
    for i, state in enumerate(states):
        t0 = clock()
        theta, spread, _ = calibrate(state)
        per_call.append(clock() - t0)
        calibs[f"u{i}"] = UserCalibration(theta, spread, PairKind.DISTRIBUTION_PRESENCE)
    t0 = clock()
    set_theta(calibs)
    return _common.percentile(per_call, 50) + (clock() - t0) / len(states)


def main(argv: list[str] | None = None) -> int:
    p = _common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--updates", type=int, default=2000, help="timed updates per cell (max)")
    p.add_argument("--cell-seconds", type=float, default=2.5, help="time cap per (rule, K) and N")
    p.add_argument("--sample", type=int, default=200, help="users timed for the full recompute")
    args = p.parse_args(argv)
    ns = (10, 100) if args.quick else (10**3, 10**4, 10**5, 10**6)
    ks = (4, 16) if args.quick else (4, 16, 64, 256)
    rules = RULES
    updates = 20 if args.quick else args.updates
    sample = 5 if args.quick else args.sample

    started = time.perf_counter()
    aggs = {n: build_aggregate(n, seed=n) for n in ns}
    build_seconds = time.perf_counter() - started
    rng = np.random.default_rng(7)
    user_ids = {n: [f"u{i}" for i in rng.integers(0, n, size=updates)] for n in ns}

    rows, flat_rows = [], []
    gc.freeze()  # the big structures are long-lived: keep the collector off them while timing
    for k in ks:
        work = Workload(k, updates, seed=k)
        states = [
            UserState(partition=0, present=True, value_units=1, counts=c) for c in work.counts
        ]
        for rule in rules:
            calibrate = work.calibrator(rule)
            recalibrated(states[0], calibrate)  # warm imports and caches
            per_user = full_recompute_per_user(states[:sample], calibrate)
            results: dict[int, tuple[list[float], list[float]]] = {n: ([], []) for n in ns}
            cell_start = time.perf_counter()
            done = 0
            while done < updates and (
                done == 0 or time.perf_counter() - cell_start < args.cell_seconds * len(ns)
            ):
                stop = min(done + CHUNK, updates)
                for n in ns:
                    tot, struct = time_updates(
                        aggs[n], states[done:stop], calibrate, user_ids[n][done:stop]
                    )
                    results[n][0].extend(tot)
                    results[n][1].extend(struct)
                done = stop
            p50s, struct_p50s = {}, {}
            for n in ns:
                tot, struct = results[n]
                p50s[n] = _common.percentile(tot, 50)
                struct_p50s[n] = _common.percentile(struct, 50)
                full = per_user * n
                rows.append((
                    rule, k, f"{n:.0e}" if n >= 1000 else n, len(tot),
                    p50s[n] * 1e6, _common.percentile(tot, 99) * 1e6,
                    _common.percentile(struct, 50) * 1e6, _common.percentile(struct, 99) * 1e6,
                    full * 1e3, full / p50s[n],
                ))
            flat_rows.append((rule, k, p50s[ns[-1]] / p50s[ns[0]],
                              struct_p50s[ns[-1]] / struct_p50s[ns[0]], per_user * 1e6))
    gc.unfreeze()
    elapsed = time.perf_counter() - started

    headers = ("rule", "K", "N", "updates", "incr p50 us", "incr p99 us", "max-struct p50 us",
               "max-struct p99 us", "full recompute ms (extrap.)", "full / incr p50")
    flat_headers = ("rule", "K", f"incr p50(N={ns[-1]:.0e}) / p50(N={ns[0]:.0e})",
                    "max-struct p50 ratio, same N", "full recompute us per user")
    print(f"incremental recalibration per report (eps {EPS}, pairs distribution_presence, "
          "no LRU cache)")
    print(_common.text_table(headers, rows))
    print("\nflatness in N (1.0 = flat)")
    print(_common.text_table(flat_headers, flat_rows))
    print(f"\nbuilt max structures in {build_seconds:.1f} s; total {elapsed:.0f} s")

    note = (
        f"Incremental = the worker's per-event path without its LRU cache: estimate from counts → "
        f"`core.user_theta` (rule, eps {EPS}, pair `distribution_presence`) → "
        "`stream_app.state.recalibrated` → `PartitionAggregate.apply` (lazy-deletion max heaps "
        "holding N users) → read the max. *max-struct* is the `apply` + max part alone. "
        f"Full recompute = `user_theta` for every user + `set_theta`, timed on {sample} users and "
        "**extrapolated linearly to N** (median per-user cost × N; not run at full size). "
        "Each user has ~2K reports drawn "
        "from a random Dirichlet histogram over {0..K-1}. The N values are timed in interleaved "
        f"chunks of {CHUNK} updates with identical inputs; a cell stops early after "
        f"{args.cell_seconds:g} s per N (see *updates*). Run time {elapsed:.0f} s."
    )
    body = (
        f"{note}\n\n**Flatness in N** (ratio of incremental p50 at the largest vs smallest N; "
        "1.0 = flat)\n\n" + _common.markdown_table(flat_headers, flat_rows)
        + "\n\n**All cells**\n\n" + _common.markdown_table(headers, rows) + "\n"
    )
    _common.report(args, NAME, "2. Recalibration cost per report vs N and K",
                   _common.command_line(NAME, argv), body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
