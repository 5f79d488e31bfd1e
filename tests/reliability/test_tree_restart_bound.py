"""The tree's contribution bound across restarts (issue 42, point 1): one user changes its value
all the time with w = 1; a clean restart (RocksDB: the aggregates kept in their checkpoint
beside the databases; memory: rebuilt after the changelog's recovery) and a SIGKILL restart
(rebuilt from the users' stored states) inside a window. The window's exact admitted sum,
read from every partial the workers published, moves at most w times; so does the exact sum
each release adds noise to. Also with windows of 1.5 periods (windows of 2 and 1 ticks)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.kafka.partitioning import partition_for
from tests.reliability.harness import (
    Cluster,
    membership,
    new_topics,
    produce_raw,
    read_all_json,
    report,
    wait_consumed,
    wait_until,
)
from tests.reliability.test_tree_takeover import PERIOD, Changer, tree_settings, window_moves

pytestmark = [pytest.mark.integration]
W = 1


def partial_moves(partials: list[dict[str, Any]], partition: int) -> dict[int, int]:
    """Per window, how often the partition's admitted sum changes between its partials (in
    the order published, across the restarts)."""
    series: dict[int, list[int]] = {}
    for p in partials:
        if p["partition"] == partition and p.get("window") is not None:
            series.setdefault(p["window"], []).append(p["admitted_units"])
    return {window: sum(1 for x, y in zip(s, s[1:], strict=False) if x != y)
            for window, s in series.items()}


def users_on(partition: int, partitions: int, n: int, prefix: str) -> list[str]:
    found = (f"{prefix}{i}" for i in range(10_000))
    return [u for u in found if partition_for(u.encode(), partitions) == partition][:n]


@pytest.mark.slow
@pytest.mark.timeout(480)
@pytest.mark.parametrize(("store", "window"), [
    ("rocksdb://", 20.0), ("rocksdb://", 1.5 * PERIOD), ("memory://", 20.0)],
    ids=["rocksdb-40-ticks", "rocksdb-2-and-1-ticks", "memory-40-ticks"])
def test_a_worker_restarted_clean_and_killed_keeps_each_window_within_w(
    broker: EmbeddedBroker, tmp_path: Path, store: str, window: float
) -> None:
    partitions = 2
    topics = new_topics(broker.bootstrap, partitions)
    nodes_topic = f"{topics.prefix}-tree-nodes"
    settings = {**tree_settings(nodes_topic, W), "PUFFERFISH_BUDGET_WINDOW_SECONDS": str(window),
                "PUFFERFISH_STORE": store, "PUFFERFISH_LOG_LEVEL": "info"}
    cluster = Cluster(broker.url, broker.bootstrap, topics, tmp_path, settings, names=("a",))
    # the changing user alone on its partition: that partition's moves are its moves
    changing = users_on(0, partitions, 1, "c")[0]
    others = users_on(1, partitions, 6, "s")
    changer = Changer(broker.bootstrap, topics.reports, changing, 0.3, values=4)
    try:
        a = cluster.start("a")
        produce_raw(broker.bootstrap, [(topics.membership, u.encode(), membership(u, "join"))
                                       for u in [*others, changing]])
        produce_raw(broker.bootstrap, [(topics.reports, u.encode(), report(u, 3.0, f"{u}-r"))
                                       for u in others])
        wait_consumed(a, "report", len(others))
        changer.thread.start()
        cluster.more_releases(8, a)
        # a clean stop with every write acknowledged keeps the aggregates in their checkpoint
        changer.paused.set()
        time.sleep(0.5)  # a report already on its way when paused lands (the pace is 0.3 s)
        sent = changer.sent
        wait_consumed(a, "report", len(others) + sent)
        assert a.stop() == 0, a.tail()
        a = cluster.start("a")
        if store == "rocksdb://":  # the memory store recovers from the changelog: a rebuild
            assert "kept for the next start" in cluster.workers[-2].output()
            wait_until(lambda: "from its checkpoint" in a.output(), 60, "the checkpoint read",
                       0.2, a)
        changer.paused.clear()
        cluster.more_releases(8, a)
        a.kill9()  # a crash: the aggregates rebuilt from the users' stored states
        a = cluster.start("a")
        cluster.more_releases(8, a)
        held = a.metric("pufferfish_tree_changes_held_total") or 0.0
    finally:
        changer.stop.set()
        changer.thread.join(timeout=10)
        cluster.stop()
    partials = read_all_json(broker.bootstrap, topics.partials)
    by_partials = partial_moves(partials, 0)
    journal = sorted(cluster.releases(), key=lambda r: r["tick"])
    by_releases = window_moves(journal, read_all_json(broker.bootstrap, nodes_topic))
    print(f"\nTREE restart bound ({window:g} s windows): {changer.sent} reports of the "
          f"changing user, moves per window in the partials {by_partials}, in the releases "
          f"{by_releases}, {held:g} changes held by the last worker")
    assert changer.sent >= 30  # far more changes than w allows in a window
    # The checks can fail: the user's admitted contribution moved (at a window's base or by
    # an admitted change) and the bound held changes back. A window's one admitted change
    # need not show as a move between partials: under load the window's first partial may
    # already carry it (run H, tests/README.md).
    admitted = {p["admitted_units"] for p in partials
                if p["partition"] == 0 and p.get("window") is not None}
    assert len(admitted) > 1, admitted
    assert held > 0
    assert all(n <= W for n in by_partials.values()), by_partials
    assert all(n <= W for n in by_releases.values()), by_releases
    ticks = [r["tick"] for r in journal]
    assert len(set(ticks)) == len(ticks)  # no tick published twice
