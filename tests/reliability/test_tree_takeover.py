"""The tree mechanism across SIGKILL and rebalances (real workers, tansu and Apache Kafka): the node
journal (``topic_tree_nodes``) holds each node once, every release after a takeover adds up the same
base and nodes as those before it (noisy sum - its nodes' journaled noise = the exact sum, the
same in every release once the data is in), and a window's budget is charged once, never
exceeded (docs/design.md, "Continual release: wiring the tree")."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer

from stream_app.demo.broker import EmbeddedBroker
from stream_app.kafka.partitioning import partition_for
from tests.noida_broker import NoidaBroker
from tests.reliability.harness import (
    Broker,
    Cluster,
    compat_for,
    membership,
    new_topics,
    produce_raw,
    read_all_json,
    report,
    wait_consumed,
    wait_until,
)

pytestmark = [pytest.mark.integration]

PERIOD, WINDOW, BUDGET, GRID = 0.5, 20.0, 5.0, 1024


def tree_settings(nodes_topic: str, max_changes: int) -> dict[str, str]:
    return {"PUFFERFISH_RELEASE_PERIOD_SECONDS": str(PERIOD),
            "PUFFERFISH_BUDGET_WINDOW_SECONDS": str(WINDOW),
            "PUFFERFISH_BUDGET_TOTAL": str(BUDGET), "PUFFERFISH_RELEASE_MECHANISM": "tree",
            "PUFFERFISH_MAX_CHANGES_PER_WINDOW": str(max_changes),
            "PUFFERFISH_TOPIC_TREE_NODES": nodes_topic}


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_sigkill_and_rebalances_mid_window_continue_the_same_tree(
    each_fresh_broker: Broker, tmp_path: Path
) -> None:
    broker = each_fresh_broker
    topics = new_topics(broker.bootstrap, 2)
    nodes_topic = f"{topics.prefix}-tree-nodes"
    settings = tree_settings(nodes_topic, 2)
    cluster = Cluster(broker.url, broker.bootstrap, topics, tmp_path, settings,
                      compat=compat_for(broker))
    start, releases, more_releases = cluster.start, cluster.releases, cluster.more_releases

    users = [f"u{i}" for i in range(20)]
    values = {u: i % 6 for i, u in enumerate(users)}
    try:
        a = start("a")
        produce_raw(broker.bootstrap, [(topics.membership, u.encode(), membership(u, "join"))
                                       for u in users])
        wait_consumed(a, "membership", len(users))
        produce_raw(broker.bootstrap, [(topics.reports, u.encode(), report(u, v, f"{u}-r"))
                                       for u, v in values.items()])
        wait_consumed(a, "report", len(users))
        settled = int((time.time() + 2) // WINDOW) + 1  # the first window that opens after
        wait_until(lambda: any(r["window"] >= settled for r in releases()), 60,
                   "a release of the next window", 0.5, a)
        more_releases(3, a)
        b = start("b")  # a member joins: rebalance mid-window
        more_releases(4, b)
        a.kill9()  # SIGKILL, mid-window (the owner or not: a rebalance either way)
        more_releases(6, b)
        a = start("a")
        more_releases(4, a)
        b.kill9()
        more_releases(6, a)
    finally:
        cluster.stop()
    journal = releases()
    nodes = read_all_json(broker.bootstrap, nodes_topic)
    drawn = Counter((n["window"], n["node"]) for n in nodes)
    assert max(drawn.values()) == 1, [k for k, c in drawn.items() if c > 1]  # none drawn twice
    noise = {(n["window"], n["node"]): n["units"] for n in nodes}
    exact = sum(values.values()) * GRID
    checked = [r for r in journal if r["window"] >= settled]
    assert len(checked) >= 20
    ticks = [r["tick"] for r in journal]
    assert len(set(ticks)) == len(ticks)  # no tick published twice
    for r in checked:  # the same base and nodes, whoever drew them and whoever publishes
        assert r["mechanism"] == "tree" and r["window_tick"] >= 0
        units = round(r["noisy_sum"] * GRID)
        assert units - sum(noise[(r["window"], n)] for n in r["nodes"]) == exact, r
    for window in {r["window"] for r in journal}:
        mine = [r for r in journal if r["window"] == window]
        charged = [r["charge"] for r in mine if r["charge"] > 0]
        assert charged == [BUDGET], (window, charged)  # the window's charge, once
        assert all(r["epsilon_spent"] <= BUDGET for r in mine)
    gaps = sorted(set(range(min(ticks), max(ticks) + 1)) - set(ticks))
    print(f"\nTREE takeover: {len(checked)} releases over windows "
          f"{sorted({r['window'] for r in checked})}, {len(nodes)} nodes, gaps {gaps}")
    # late ticks of a window after a takeover read the rebuilt partitions' final sum of it
    assert gaps == []


def window_moves(journal: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> dict[int, int]:
    """Per window, how often the exact sum its releases add noise to (the noisy sum minus its
    nodes' journaled noise) changes from one release to the next (``journal`` in tick order);
    each node journaled once (else an AssertionError)."""
    drawn = Counter((n["window"], n["node"]) for n in nodes)
    assert max(drawn.values()) == 1, [k for k, c in drawn.items() if c > 1]
    noise = {(n["window"], n["node"]): n["units"] for n in nodes}
    moves = {}
    for window in sorted({r["window"] for r in journal}):
        series = [round(r["noisy_sum"] * GRID) - sum(noise[(window, n)] for n in r["nodes"])
                  for r in journal if r["window"] == window]
        moves[window] = sum(1 for x, y in zip(series, series[1:], strict=False) if x != y)
    return moves


class Changer:
    """One user reporting a new value every ``every`` seconds, from a thread of its own."""

    def __init__(self, bootstrap: str, topic: str, user: str, every: float,
                 values: int = 6) -> None:
        self.bootstrap, self.topic, self.user, self.every = bootstrap, topic, user, every
        self.values = values
        self.stop = threading.Event()
        self.paused = threading.Event()  # set: nothing sent until it is cleared
        self.sent = 0
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await producer.start()
        try:
            while not self.stop.is_set():
                if self.paused.is_set():
                    await asyncio.sleep(0.05)
                    continue
                value = float(self.sent % self.values)
                await producer.send_and_wait(self.topic, report(
                    self.user, value, f"c-{self.sent}"), key=self.user.encode())
                self.sent += 1
                await asyncio.sleep(self.every)
        finally:
            await producer.stop()


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_a_user_changing_all_the_time_moves_each_window_at_most_w_times_across_sigkills(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """The bound the charge assumes, on what the releases show: one user reports a new value
    every 2.5 s, the others stay; the exact sum each release adds noise to (its noisy sum
    minus its nodes' journaled noise) changes at most w times per window, across SIGKILLs of
    the workers (a crash never shows a state it then takes back) and rebalances."""
    w = 2
    topics = new_topics(broker.bootstrap, 2)
    nodes_topic = f"{topics.prefix}-tree-nodes"
    settings = tree_settings(nodes_topic, w)
    cluster = Cluster(broker.url, broker.bootstrap, topics, tmp_path, settings)
    start, releases, more_releases = cluster.start, cluster.releases, cluster.more_releases

    users = [f"s{i}" for i in range(10)] + ["c"]
    # a new value every 2.5 s, 8 per window: its first w in each window show, not in the
    # second before the window's first tick (the partition enters it 1 s early)
    changer = Changer(broker.bootstrap, topics.reports, "c", 2.5)
    try:
        a = start("a")
        produce_raw(broker.bootstrap, [(topics.membership, u.encode(), membership(u, "join"))
                                       for u in users])
        produce_raw(broker.bootstrap, [(topics.reports, u.encode(), report(u, 3.0, f"{u}-r"))
                                       for u in users[:-1]])
        changer.thread.start()
        more_releases(6, a)
        b = start("b")
        more_releases(6, b)
        a.kill9()
        more_releases(8, b)
        a = start("a")
        more_releases(6, a)
        b.kill9()
        more_releases(8, a)
        outage = time.time()  # no worker alive: the ticks due until a is back are not released
        a.kill9()
        a = start("a")
        outage_end = time.time()
        more_releases(8, a)
        held = a.metric("pufferfish_tree_changes_held_total") or 0.0
    finally:
        changer.stop.set()
        changer.thread.join(timeout=10)
        cluster.stop()
    journal = sorted(releases(), key=lambda r: r["tick"])
    moves = window_moves(journal, read_all_json(broker.bootstrap, nodes_topic))
    print(f"\nTREE bound: {changer.sent} reports of c, moves per window {moves}, "
          f"{held:g} changes held by the last worker")
    assert changer.sent >= 15  # c changed more often than w allows (8 per window)
    assert sum(moves.values()) > 0  # and its admitted changes show (the check can fail)
    # (ticks published late after a takeover read the state of their publication: a window
    # whose ticks came in one burst shows fewer moves, never more)
    assert all(n <= w for n in moves.values()), moves
    ticks = [r["tick"] for r in journal]  # every tick published once: waits, no skips, except
    gaps = sorted(set(range(ticks[0], ticks[-1] + 1)) - set(ticks))  # in the full outage
    assert len(set(ticks)) == len(ticks)
    # the gap starts after the last tick the stopped owner published (a loaded owner runs a
    # few ticks behind the clock: those it had not published yet are in the gap too) and ends
    # when the worker is back
    last_before_stop = max(r["tick"] for r in journal if r["ts"] <= outage)
    assert all(last_before_stop < k and k * PERIOD <= outage_end + 1 for k in gaps), \
        (gaps, last_before_stop, outage)


def produce_in_transactions(bootstrap: str, items: list[tuple[str, str, bytes]],
                            partitions: int) -> None:
    """One transaction per record: a commit marker after each, gaps in the log's offsets."""
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"tree-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    for topic, key, value in items:
        producer.begin_transaction()
        producer.produce(topic, value=value, key=key.encode(),
                         partition=partition_for(key.encode(), partitions))
        producer.commit_transaction(30)


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_the_bound_on_a_log_keeping_broker_with_transactions_and_a_restart(
    tmp_path: Path
) -> None:
    """noida-db keeps a real log: the users' joins and first reports are written in
    transactions (commit markers: offset gaps in both input topics), one user reports a new
    value every 1.5 s, and the worker restarts (SIGTERM) mid-run. Each node is journaled once,
    each window's exact sum moves at most w times, each window is charged once, and every tick
    is published once but those due while no worker ran."""
    w, partitions = 2, 2
    with NoidaBroker(tmp_path / "noida", tmp_path / "noida.log") as broker:
        topics = new_topics(broker.bootstrap, partitions)
        nodes_topic = f"{topics.prefix}-tree-nodes"
        cluster = Cluster(broker.url, broker.bootstrap, topics, tmp_path,
                          tree_settings(nodes_topic, w), names=("a",))
        users = [f"s{i}" for i in range(8)] + ["c"]
        changer = Changer(broker.bootstrap, topics.reports, "c", 1.5)
        try:
            a = cluster.start("a")
            produce_in_transactions(broker.bootstrap, [
                (topics.membership, u, membership(u, "join")) for u in users], partitions)
            produce_in_transactions(broker.bootstrap, [
                (topics.reports, u, report(u, 3.0, f"{u}-r")) for u in users[:-1]], partitions)
            changer.thread.start()
            wait_consumed(a, "report", len(users) - 1)
            cluster.more_releases(30, a)
            outage = time.time()
            assert a.stop() == 0, a.tail()
            a = cluster.start("a")
            outage_end = time.time()
            cluster.more_releases(30, a)
            # the bound is only tested with enough changes: counted, not assumed from the clock
            # (a loaded machine sent 27 in the time of the 60 releases)
            wait_until(lambda: changer.sent >= 30, 120, "30 reports of c", worker=a)
            letters = read_all_json(broker.bootstrap, topics.deadletter)
        finally:
            changer.stop.set()
            changer.thread.join(timeout=10)
            cluster.stop()
        journal = sorted(cluster.releases(), key=lambda r: r["tick"])
        moves = window_moves(journal, read_all_json(broker.bootstrap, nodes_topic))
    print(f"\nTREE on noida-db: {changer.sent} reports of c, moves per window {moves}")
    assert letters == []  # every transactional record counted, none dead-lettered
    assert changer.sent >= 30 and sum(moves.values()) > 0  # the check can fail
    assert all(n <= w for n in moves.values()), moves
    for window in moves:
        charged = [r["charge"] for r in journal if r["window"] == window and r["charge"] > 0]
        assert charged == [BUDGET], (window, charged)
    ticks = [r["tick"] for r in journal]
    gaps = sorted(set(range(ticks[0], ticks[-1] + 1)) - set(ticks))
    assert len(set(ticks)) == len(ticks)
    # the gap starts after the last tick the stopped owner published (a loaded owner runs a
    # few ticks behind the clock: those it had not published yet are in the gap too) and ends
    # when the worker is back
    last_before_stop = max(r["tick"] for r in journal if r["ts"] <= outage)
    assert all(last_before_stop < k and k * PERIOD <= outage_end + 1 for k in gaps), \
        (gaps, last_before_stop, outage)
