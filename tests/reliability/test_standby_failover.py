"""Standby replicas (``table_standby_replicas``, RocksDB): two workers, the release owner
SIGKILLed; the survivor already holds a standby copy of the dead worker's partitions, so it takes
them over replaying only the changelog's tail, releases again, and its sums are exact.

The time from the kill to the survivor's first release is printed (bench/RESULTS.md has the
1e5-user figure from ``python -m bench recovery --failover``); it includes the broker's session
timeout (6 s here), which is when the group learns of the death. The survivor's first release
comes after it read both journals anew, once the kill had happened (a new owner never publishes
from what it knew before: docs/design.md, "Release durability"). The replay is read from Faust's
recovery log tables: the offsets it starts reading each changelog partition from, against their
highwaters.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    Broker,
    Worker,
    changelog_records,
    compat_for,
    laplace_bound,
    new_topics,
    produce_raw,
    read_json,
    wait_counted,
    wait_for_records,
    wait_ready,
    wait_until,
    worker_env,
)
from tests.reliability.test_crash_recovery import _release_owner
from tests.reliability.workload import Workload

pytestmark = [pytest.mark.integration]

STANDBY = {"PUFFERFISH_STORE": "rocksdb://", "PUFFERFISH_TABLE_STANDBY_REPLICAS": "1"}
ROW = re.compile(r"[│|]\s*(\S+)\s*[│|]\s*(\d+)\s*[│|]\s*(-?\d+)\s*[│|]")


def recovery_tables(log: str, changelog: str) -> list[tuple[str, dict[int, int]]]:
    """Faust's recovery log tables of the users changelog, in log order: ("highwater" or
    "start", partition -> offset). Rows after a table's first name it with a ditto mark."""
    out: list[tuple[str, dict[int, int]]] = []
    kind, topic = None, None
    for line in log.splitlines():
        if "Highwater - Active" in line:
            kind, topic = "highwater", None
            out.append((kind, {}))
        elif "Reading Starts At - Active" in line:
            kind, topic = "start", None
            out.append((kind, {}))
        elif kind is not None and (m := ROW.search(line)):
            name, partition, offset = m.groups()
            topic = topic if name == "〃" else name
            if topic == changelog:
                out[-1][1][int(partition)] = int(offset)
        elif kind is not None and not line.strip().startswith(("│", "|", "┌", "├", "└", "+")):
            kind = None
    return out


STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def logged_at(log: str, text: str) -> float:
    """The wall time (local, as the worker logs it) of the first line holding ``text``."""
    for line in log.splitlines():
        if text in line and (m := STAMP.match(line)):
            return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    raise AssertionError(f"not logged: {text!r}")


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_survivor_with_standbys_takes_over_from_the_tail(each_broker: Broker,
                                                         tmp_path: Path) -> None:
    broker = each_broker
    topics = new_topics(broker.bootstrap, 4)
    wl = Workload.make(n_users=400, per_user=3, dup_every=0, seed=17, prefix="sb")
    workers = [Worker(worker_env(broker.url, topics, tmp_path / f"data-{n}",
                                 {**EXACT_SUM_SETTINGS, **STANDBY},
                                 compat=compat_for(broker)), tmp_path, f"standby-{n}")
               for n in "ab"]
    try:
        for w in workers:
            w.start()
        for w in workers:
            wait_ready(w)
        produce_raw(broker.bootstrap, wl.joins(topics))
        produce_raw(broker.bootstrap, Workload.encode(topics, wl.reports))
        wait_counted(broker.bootstrap, topics, len(wl.reports), workers[0], to_end=True)
        expected = wl.expected_sum()
        wait_for_records(broker.bootstrap, topics.releases, lambda recs: recs and abs(
            recs[-1]["noisy_sum"] - expected) <= laplace_bound(recs[-1]["theta"]),
            90, f"a release of the exact sum {expected}", workers[0])
        victim = wait_until(lambda: _release_owner(workers), 60, "the release owner", 0.1,
                            workers[0])
        survivor = workers[1] if victim is workers[0] else workers[0]
        seen = len(survivor.output())
        last_seq = max(r["seq"] for r in read_json(broker.bootstrap, topics.releases, 1.0))
        killed, killed_at = time.monotonic(), time.time()
        victim.kill9()

        # the victim's release in flight at the kill may still land (its transaction was
        # committed as the kill came: run N, tests/README.md); it carries the victim's clock,
        # before the kill: the survivor's releases are those stamped after it
        def survivors() -> list[dict[str, Any]]:
            return [r for r in read_json(broker.bootstrap, topics.releases, 1.0)
                    if r["seq"] > last_seq and r["ts"] > killed_at]

        wait_until(lambda: bool(survivors()), 90, "the survivor's first release", 0.2,
                   survivor)
        took = time.monotonic() - killed
        after = [r for r in read_json(broker.bootstrap, topics.releases, 1.0)
                 if r["seq"] > last_seq]
        taken_over = survivors()
        changelog = f"{topics.app_id}-users-changelog"

        def logged() -> list[tuple[str, dict[int, int]]] | None:
            """Faust's recovery tables of the takeover: they may come after the first release
            (the survivor's clock publishes as soon as it owns the releases)."""
            found = recovery_tables(survivor.output()[seen:], changelog)
            complete = {kind for kind, t in found if len(t) == 4}
            return found if complete == {"highwater", "start"} else None

        tables = wait_until(logged, 60, "the survivor's recovery tables in its log", 0.2,
                            survivor)
        total = len(changelog_records(broker.bootstrap, topics.app_id))
        takeover = survivor.output()[seen:]
    finally:
        for w in workers:
            w.stop()
    assert all(abs(r["noisy_sum"] - expected) <= laplace_bound(r["theta"]) for r in after), after
    read_from, read = (logged_at(takeover, line) for line in (
        "reading the releases and priors journals", "journals restored"))
    # (log times are truncated to the millisecond: a release's ts is never below its read's)
    assert killed_at - 0.001 <= read_from <= read <= min(r["ts"] for r in taken_over), (
        killed_at, read_from, read, after)
    highwaters = [t for kind, t in tables if kind == "highwater" and len(t) == 4]
    starts = [t for kind, t in tables if kind == "start" and len(t) == 4]
    assert highwaters and starts, tables
    replayed = sum(max(hw - starts[-1].get(p, -1), 0) for p, hw in highwaters[-1].items())
    print(f"\nRELIABILITY standby-failover ({type(broker).__name__}): kill -> first release "
          f"{took:.1f} s, changelog "
          f"records replayed {replayed} of {total}")
    assert replayed < total / 4, (replayed, total, tables)
