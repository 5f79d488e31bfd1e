"""Once the privacy budget is spent there is no further release: not later, not after restarts.

epsilon = 0.5 per release with value pairs (charge = epsilon exactly), budget_total = 1.5:
exactly three releases (seq 1..3, spent 0.5/1.0/1.5), then none, across a SIGKILL restart and a
SIGTERM restart with more input arriving.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stream_app.demo.broker import EmbeddedBroker
from tests.kafka_helpers import delete_topic
from tests.reliability.harness import (
    Topics,
    Worker,
    join,
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

SETTINGS = {
    "PUFFERFISH_EPSILON": "0.5",
    "PUFFERFISH_BUDGET_TOTAL": "1.5",
    "PUFFERFISH_RELEASE_PERIOD_SECONDS": "0.5",
    "PUFFERFISH_PAIRS": '["value_presence", "value_change"]',
    "PUFFERFISH_LOG_LEVEL": "info",
}


def _exhausted(worker: Worker) -> bool:
    return worker.metric("pufferfish_budget_exhausted") == 1.0


def _topics_env(broker: EmbeddedBroker, tmp_path: Path, partitions: int
                ) -> tuple[Topics, dict[str, str]]:
    topics = new_topics(broker.bootstrap, partitions)
    return topics, worker_env(broker.url, topics, tmp_path / "data", SETTINGS)


def _spend_all(bootstrap: str, topics: Topics, w: Worker, users: list[str],
               feed: Callable[[], object]) -> None:
    """Ready, join the users, send their reports, wait until the budget is spent."""
    wait_ready(w)
    join(bootstrap, topics, w, users)
    feed()
    wait_until(lambda: _exhausted(w), 60, "budget_exhausted == 1", 0.5, w)


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_no_release_after_the_budget_is_spent_across_restarts(broker_module: EmbeddedBroker,
                                                              tmp_path: Path) -> None:
    broker = broker_module
    topics, env = _topics_env(broker, tmp_path, 2)
    users = [f"b{i}" for i in range(6)]
    sent = 0

    def feed(tag: str) -> None:
        nonlocal sent
        now = time.time()
        produce_raw(broker.bootstrap, [
            (topics.reports, u.encode(), report(u, (i + sent) % 6, f"{u}-{tag}", ts=now + i))
            for i, u in enumerate(users)])
        sent += len(users)

    w = Worker(env, tmp_path, "budget-1").start()
    try:
        _spend_all(broker.bootstrap, topics, w, users, lambda: feed("a"))
        feed("b")
        wait_consumed(w, "report", 2 * len(users))
        # The scenario: an observation window of 3 release periods in which any release is a
        # bug. A "nothing happens" check has no condition to wait for; a slow machine can only
        # shorten what the window sees, never make it fail.
        time.sleep(1.5)
        spent_metric = w.metric("pufferfish_epsilon_spent")
        w.kill9()
    finally:
        w.kill9()
    first_life = read_all_json(broker.bootstrap, topics.releases)  # all of them: no writer now

    restarts = []
    for how in ("sigkill", "sigterm"):
        w = Worker(env, tmp_path, f"budget-after-{how}").start()
        try:
            wait_ready(w)
            feed(f"after-{how}")
            # It must reach the point of refusing a release, i.e. it synced the journal.
            wait_until(lambda w=w: _exhausted(w), 60, "restarted worker refuses releases", 0.5, w)
            time.sleep(1.5)  # observation window, as above
            restarts.append((how, w.metric("pufferfish_epsilon_spent"),
                             w.metric("pufferfish_releases_total")))
        finally:
            if how == "sigkill":
                w.kill9()
            else:
                w.stop()
    final = read_all_json(broker.bootstrap, topics.releases)

    print(f"\nRELIABILITY budget: releases_before_restart={len(first_life)}, "
          f"releases_after_two_restarts={len(final)}, restarts={restarts}, "
          f"reports_sent={sent}")
    assert [r["seq"] for r in final] == [1, 2, 3], final
    assert [r["epsilon_spent"] for r in final] == [0.5, 1.0, 1.5]
    assert [r["epsilon_remaining"] for r in final] == [1.0, 0.5, 0.0]
    assert first_life == final
    assert spent_metric == 1.5
    for how, spent, releases in restarts:
        assert spent == 1.5, how
        assert releases == 0.0, how


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_budget_survives_loss_of_the_releases_journal(broker_module: EmbeddedBroker,
                                                      tmp_path: Path) -> None:
    import asyncio

    broker = broker_module
    topics, env = _topics_env(broker, tmp_path, 1)
    w = Worker(env, tmp_path, "journal-1").start()
    try:
        _spend_all(broker.bootstrap, topics, w, ["j1"], lambda: produce_raw(
            broker.bootstrap, [(topics.reports, b"j1", report("j1", 3, "j1-a", 2.0))]))
    finally:
        w.stop()
    assert len(read_all_json(broker.bootstrap, topics.releases)) == 3
    # retention expired / topic lost: the journal is empty again
    asyncio.run(delete_topic(broker.bootstrap, topics.releases))
    w = Worker(env, tmp_path, "journal-2").start()
    try:
        wait_ready(w)
        produce_raw(broker.bootstrap, [(topics.reports, b"j1", report("j1", 4, "j1-b", 3.0))])
        wait_consumed(w, "report", 1)
        time.sleep(4.0)  # observation window (8 release periods), as in the test above
        spent = w.metric("pufferfish_epsilon_spent")
    finally:
        w.stop()
    after = read_all_json(broker.bootstrap, topics.releases)
    print(f"\nRELIABILITY journal-loss: releases_after_loss={len(after)}, epsilon_spent={spent}")
    assert after == [], f"{len(after)} releases after the budget was spent: {after[:2]}"
