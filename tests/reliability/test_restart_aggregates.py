"""The partition aggregates a worker publishes (its partials) are the same after a restart as
before it, after a SIGTERM and after a SIGKILL, on both table stores: the memory store restores
the users from the changelog, RocksDB keeps them on disk; either way each partition's aggregate
is rebuilt from its users (stream_app/faust_adapter/user_table.py, docs/design.md, "Aggregates
after a restart").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    STORES,
    Broker,
    Topics,
    Worker,
    compat_for,
    new_topics,
    produce_raw,
    read_all_json,
    wait_consumed,
    wait_counted,
    wait_ready,
    wait_until,
    worker_env,
)
from tests.reliability.workload import Workload

pytestmark = [pytest.mark.integration]

# (newest_ts is rebuilt from the users' newest reports: a join's ts is not kept in the state)
FIELDS = ("sum_units", "group_units")


def latest_partials(bootstrap: str, topics: Topics) -> tuple[int, dict[int, dict[str, Any]]]:
    """How many partials were published, and the newest of each input partition."""
    records = read_all_json(bootstrap, topics.partials)
    return len(records), {int(r["partition"]): {k: r[k] for k in FIELDS} for r in records}


def wait_partials_after(bootstrap: str, topics: Topics, published: int, worker: Worker
                        ) -> dict[int, dict[str, Any]]:
    """The newest partial of every partition once each published one more after `published`
    records (a restarted worker publishes each rebuilt aggregate once)."""
    box: dict[str, Any] = {}

    def fresh() -> bool:
        records = read_all_json(bootstrap, topics.partials)[published:]
        box["new"] = {int(r["partition"]): {k: r[k] for k in FIELDS} for r in records}
        return len(box["new"]) == topics.partitions

    wait_until(fresh, 90, "a partial of every partition after the restart", 0.5, worker)
    return dict(box["new"])


@pytest.mark.timeout(240)
@pytest.mark.slow
@pytest.mark.parametrize("store", STORES, ids=lambda s: s.split(":")[0])
def test_aggregates_after_a_restart_equal_those_before(
    each_broker: Broker, tmp_path: Path, store: str
) -> None:
    bootstrap = each_broker.bootstrap
    topics = new_topics(bootstrap, 2)
    wl = Workload.make(n_users=30, per_user=4, dup_every=0, seed=3, prefix="agg")
    env = worker_env(each_broker.url, topics, tmp_path / "data", EXACT_SUM_SETTINGS, store,
                     compat_for(each_broker))
    worker = Worker(env, tmp_path, "first").start()
    try:
        wait_ready(worker)
        produce_raw(bootstrap, wl.joins(topics))
        wait_consumed(worker, "membership", len(wl.users))
        produce_raw(bootstrap, Workload.encode(topics, wl.reports))
        wait_counted(bootstrap, topics, len(wl.reports), worker, to_end=True)

        def settled() -> bool:  # every partition's newest partial shows every user's value
            _, newest = latest_partials(bootstrap, topics)
            return sum(p["sum_units"] for p in newest.values()) == \
                wl.expected_sum() * 1024 and len(newest) == topics.partitions

        wait_until(settled, 60, "partials of the whole workload", 0.5, worker)
        published, before = latest_partials(bootstrap, topics)
        for how in ("sigterm", "sigkill"):
            if how == "sigterm":
                assert worker.stop() == 0, worker.tail()
            else:
                worker.kill9()
            worker = Worker(env, tmp_path, f"after-{how}").start()
            wait_ready(worker)
            after = wait_partials_after(bootstrap, topics, published, worker)
            assert after == before, how
            published, _ = latest_partials(bootstrap, topics)
        assert "rebuilt the aggregates of partitions" in worker.output()
    finally:
        worker.stop()
