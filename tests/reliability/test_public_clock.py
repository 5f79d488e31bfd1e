"""The public clock on real workers (tansu): one release per tick whatever the load, ticks and
learning rounds that the cluster agrees on across restarts and rebalances, and a release lag
read on the worker's clock (docs/privacy.md, "The public clock").

Before the worker's own scheduler, Faust's ``app.timer`` drifted and the releaser dropped a tick
whenever the previous one still ran: a 1 s period under 3,000 reports/s published 30 releases
in 40 s, and every takeover could add a learning round.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from bench.harness import DOMAIN
from bench.markers import offer
from bench.workload import Workload, produce_sync
from pufferfish_core.plan import learning_due
from stream_app.demo.broker import EmbeddedBroker
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    Broker,
    Cluster,
    Topics,
    Worker,
    check_journal,
    compat_for,
    membership,
    new_topics,
    produce_raw,
    read_all_json,
    report,
    wait_consumed,
    wait_ready,
    wait_until,
    worker_env,
)

pytestmark = [pytest.mark.integration]


def input_topics(topics: Topics) -> dict[str, str]:
    return {"reports": topics.reports, "membership": topics.membership}


def ticks_of(releases: list[dict[str, Any]]) -> list[int]:
    return [int(r["tick"]) for r in releases]


def assert_consecutive(ticks: list[int]) -> None:
    assert ticks, "no release"
    assert len(set(ticks)) == len(ticks), f"ticks published twice: {sorted(ticks)}"
    missing = sorted(set(range(min(ticks), max(ticks) + 1)) - set(ticks))
    assert missing == [], f"ticks without a release: {missing}"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_every_tick_is_released_once_under_a_steady_load(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topics = new_topics(broker.bootstrap, 2)
    env = worker_env(broker.url, topics, tmp_path / "data", {
        **EXACT_SUM_SETTINGS, "PUFFERFISH_RELEASE_PERIOD_SECONDS": "1",
        "PUFFERFISH_DOMAIN": json.dumps(list(DOMAIN))})
    work = Workload(users=2000, seed=35)
    worker = Worker(env, tmp_path, "clock").start()
    try:
        wait_ready(worker)
        produce_sync(broker.bootstrap, input_topics(topics), work.setup_joins())
        wait_consumed(worker, "membership", 2000, timeout=120)
        # the ticks due while the worker started up are published first, at once (late)
        wait_until(lambda: read_all_json(broker.bootstrap, topics.releases), 60,
                   "the first release", 0.5, worker)
        started = time.time()
        sent, _ = offer(broker.bootstrap, input_topics(topics), work, 3000.0, 40.0, [])
        ended = time.time()
        wait_until(lambda: any(r["ts"] > ended + 2 for r in
                               read_all_json(broker.bootstrap, topics.releases)),
                   60, "a release after the load", 0.5, worker)
        releases = read_all_json(broker.bootstrap, topics.releases)
        lateness = worker.metric("pufferfish_release_tick_lateness_seconds_sum")
    finally:
        worker.stop()
    assert sent >= 0.95 * 3000 * 40
    assert_consecutive(ticks_of(releases))
    during = [r for r in releases if started <= r["ts"] <= ended]
    spans = [[r for r in during if s["ts"] <= r["ts"] < s["ts"] + 40.0]
             for s in during if s["ts"] + 40.0 <= ended + 1.0]
    counts = sorted({len(span) for span in spans} or {len(during)})
    late = [round(r["ts"] - r["tick"] * 1.0, 2) for r in releases]
    print(f"\nCLOCK lateness per release: {late}")
    print(f"\nCLOCK steady load: {sent} reports in {ended - started:.1f} s, "
          f"{len(during)} releases, 40 s spans hold {counts}, lateness sum {lateness}")
    # any 40 s span of the load: 40 +- 1 releases (their ticks are consecutive, above)
    assert all(39 <= n <= 41 for n in counts), counts
    assert 39 <= len(during) <= 42


def round_ticks(priors: list[dict[str, Any]]) -> list[int]:
    return sorted({int(p["tick"]) for p in priors})


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_rolling_restarts_and_rebalances_keep_one_release_and_the_due_rounds_per_tick(
    each_fresh_broker: Broker, tmp_path: Path
) -> None:
    broker = each_fresh_broker
    period, learn, window = 0.5, 2.0, 20.0
    topics = new_topics(broker.bootstrap, 2)
    settings = {**EXACT_SUM_SETTINGS, "PUFFERFISH_RELEASE_PERIOD_SECONDS": str(period),
                "PUFFERFISH_LEARN_PERIOD_SECONDS": str(learn), "PUFFERFISH_EPSILON_LEARN": "1e6",
                "PUFFERFISH_BUDGET_WINDOW_SECONDS": str(window)}
    cluster = Cluster(broker.url, broker.bootstrap, topics, tmp_path, settings,
                      compat=compat_for(broker))
    start, releases, more_releases = cluster.start, cluster.releases, cluster.more_releases

    try:
        a = start("a")
        more_releases(4, a)
        b = start("b")  # a member joins: rebalance
        more_releases(6, b)
        assert a.stop() == 0, a.tail()  # rolling restart of a, mid-window
        more_releases(6, b)
        a = start("a")
        more_releases(6, a)
        assert b.stop() == 0, b.tail()  # rolling restart of b
        more_releases(6, a)
        b = start("b")
        more_releases(6, b)
    finally:
        cluster.stop()
    journal, priors = releases(), read_all_json(broker.bootstrap, topics.priors)
    ticks = ticks_of(journal)
    assert_consecutive(ticks)  # a worker was up throughout: no gap, none twice
    assert check_journal(journal).conflicting_seqs == []
    # each record's privacy window is its tick's, whoever published it and when
    assert all(r["window"] == int(r["tick"] * period // window) for r in journal + priors)
    for w in {r["window"] for r in journal}:  # and within a window the budget only grows
        spent = [r["epsilon_spent"] for r in journal if r["window"] == w]
        assert spent == sorted(spent), (w, spent)
    first, last = min(ticks), max(ticks)
    due = [k for k in range(first, last + 1) if learning_due(k, period, learn)]
    got = round_ticks(priors)
    print(f"\nCLOCK rolling restarts: ticks {first}..{last} ({len(ticks)} releases), "
          f"rounds at {len(got)} ticks, {len(due)} due")
    # exactly the rounds the plan gives for the elapsed ticks (a worker stopped between a
    # round and its release may leave the next tick's round alone at the end)
    assert [k for k in got if k <= last] == due
    assert len([k for k in got if k > last]) <= 1
    assert len({p["seq"] for p in priors}) == len(got)  # one seq per round: no round twice
    assert len(due) >= 8


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_release_lag_is_the_worker_s_and_silence_adds_nothing(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topics = new_topics(broker.bootstrap, 2)
    env = worker_env(broker.url, topics, tmp_path / "data", EXACT_SUM_SETTINGS)
    worker = Worker(env, tmp_path, "lag").start()
    try:
        wait_ready(worker)
        year_ago = time.time() - 365 * 86400
        sent_at = time.time()
        produce_raw(broker.bootstrap, [
            (topics.membership, b"u1", membership("u1", "join", year_ago)),
            (topics.reports, b"u1", report("u1", 3.0, "r1", year_ago + 1))])
        # the exact sum shows 3 (noise of scale <= 5e-6) in the first release including it
        wait_until(lambda: any(abs(r["noisy_sum"] - 3.0) < 0.01 for r in
                               read_all_json(broker.bootstrap, topics.releases)),
                   60, "a release of the report", 0.25, worker)
        first = next(r for r in read_all_json(broker.bootstrap, topics.releases)
                     if abs(r["noisy_sum"] - 3.0) < 0.01)
        count = worker.metric("pufferfish_release_lag_seconds_count")
        total = worker.metric("pufferfish_release_lag_seconds_sum")
        time.sleep(10.0)  # the scenario: 10 s of silence, 20 ticks of 0.5 s
        later = worker.metric("pufferfish_release_lag_seconds_count")
        published = len(read_all_json(broker.bootstrap, topics.releases))
    finally:
        worker.stop()
    assert count is not None and total is not None and later is not None
    # the join and the report: one observation each at most, none during the silence
    assert 1 <= count <= 2 and later == count and published >= 20
    # every observation is at most the real delay from production to publication
    assert total <= count * (first["ts"] - sent_at), (total, count, first["ts"] - sent_at)
