"""The changelog flush window (``changelog_flush_seconds``) on a real broker.

- A user who reports in several batches of one window gets one changelog record (with 0, one per
  batch), and an idle window is flushed by its timer: its input offsets are then committed.
- A SIGKILL that loses an open window (nothing of it written, no offset committed) loses
  nothing: the restarted worker replays the input into the state the input dictates, with the
  one dead letter written once.
- A graceful stop writes the open window and commits its offsets.
The expected states are computed here from the records the test sends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stream_app.demo.broker import EmbeddedBroker
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    Topics,
    Worker,
    changelog_records,
    committed,
    join,
    new_topics,
    produce_raw,
    read_json,
    report,
    users_changelog,
    wait_consumed,
    wait_counted,
    wait_ready,
    wait_until,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

DOMAIN_SIZE = 6  # the harness's domain [0..5]: a state's counts are indexed by value
USERS = ("a", "b", "c")
REPORTS = [(u, (i * 7 + j) % DOMAIN_SIZE, f"{u}-r{j}") for i, u in enumerate(USERS)
           for j in range(4)]
MALFORMED = b'{"user_id": "b", "value": '


def env_for(broker: EmbeddedBroker, topics: Topics, data: Path, flush: str) -> dict[str, str]:
    return worker_env(broker.url, topics, data, {
        **EXACT_SUM_SETTINGS, "PUFFERFISH_CHANGELOG_FLUSH_SECONDS": flush,
        "PUFFERFISH_BROKER_COMMIT_INTERVAL_SECONDS": "0.5",
    })


def start(broker: EmbeddedBroker, tmp_path: Path, partitions: int, flush: str,
          name: str = "w") -> tuple[Topics, dict[str, str], Worker]:
    """Fresh topics and a worker on them with this flush window."""
    topics = new_topics(broker.bootstrap, partitions)
    env = env_for(broker, topics, tmp_path / "data", flush)
    return topics, env, Worker(env, tmp_path, name).start()


def records_of(bootstrap: str, topics: Topics, user: str) -> list[dict[str, Any]]:
    return [v for k, v in changelog_records(bootstrap, topics.app_id) if k == user]


def expected_counts(user: str) -> list[int]:
    counts = [0] * DOMAIN_SIZE
    for u, value, _ in REPORTS:
        if u == user:
            counts[value] += 1
    return counts


@pytest.mark.parametrize(("flush", "records"), [("0", 5), ("10", 1)])
def test_one_changelog_record_per_user_and_window(
    broker_module: EmbeddedBroker, tmp_path: Path, flush: str, records: int
) -> None:
    bootstrap = broker_module.bootstrap
    topics, _, worker = start(broker_module, tmp_path, 1, flush)
    try:
        wait_ready(worker)
        join(bootstrap, topics, worker, ["u"])
        wait_until(lambda: records_of(bootstrap, topics, "u"), 30,
                   "the join's window written", 0.5, worker)
        before = len(records_of(bootstrap, topics, "u"))
        for k in range(5):  # each report in a batch of its own: consumed before the next
            produce_raw(bootstrap, [(topics.reports, b"u", report("u", k, f"r{k}", 2.0 + k))])
            wait_consumed(worker, "report", k + 1)
        # no further input: the window is flushed by its timer, then its offsets committed
        wait_until(lambda: committed(bootstrap, topics.app_id, topics.reports) == {0: 5}, 40,
                   "the reports' offsets committed", 0.5, worker)
        mine = records_of(bootstrap, topics, "u")
        assert len(mine) - before == records, mine
        assert mine[-1]["counts"] == [1, 1, 1, 1, 1, 0]
    finally:
        worker.stop()


def test_a_sigkill_that_loses_an_open_window_loses_nothing(
    broker_module: EmbeddedBroker, tmp_path: Path
) -> None:
    bootstrap = broker_module.bootstrap
    topics, env, first = start(broker_module, tmp_path, 2, "60", "first")
    restarted: Worker | None = None
    try:
        wait_ready(first)
        join(bootstrap, topics, first, list(USERS))
        produce_raw(bootstrap, [(topics.reports, u.encode(), report(u, v, rid, 2.0))
                                for u, v, rid in REPORTS]
                    + [(topics.reports, b"b", MALFORMED)])
        wait_consumed(first, "report", len(REPORTS))
        # the whole input is in the open window: nothing written, nothing committed
        assert changelog_records(bootstrap, topics.app_id) == []
        assert read_json(bootstrap, topics.deadletter, 1.0) == []
        assert committed(bootstrap, topics.app_id, topics.reports) == {}
        first.kill9()

        restarted = Worker({**env, "PUFFERFISH_CHANGELOG_FLUSH_SECONDS": "0.5"},
                           tmp_path, "restarted").start()
        wait_ready(restarted)
        wait_counted(bootstrap, topics, len(REPORTS), restarted, to_end=True)
        states = users_changelog(bootstrap, topics.app_id)
        for user in USERS:
            assert states[user]["counts"] == expected_counts(user), (user, states[user])
            assert states[user]["present"]
        letters = read_json(bootstrap, topics.deadletter, 2.0)
        assert [(d["reason"], d["source_topic"]) for d in letters] == [
            ("malformed_json", topics.reports)], letters
    finally:
        first.kill9()
        if restarted is not None:
            restarted.stop()


def test_a_graceful_stop_writes_the_open_window(
    broker_module: EmbeddedBroker, tmp_path: Path
) -> None:
    bootstrap = broker_module.bootstrap
    topics, _, worker = start(broker_module, tmp_path, 1, "60")
    try:
        wait_ready(worker)
        join(bootstrap, topics, worker, ["a"])
        produce_raw(bootstrap, [(topics.reports, b"a", report("a", 3, "r0", 2.0))])
        wait_consumed(worker, "report", 1)
        assert changelog_records(bootstrap, topics.app_id) == []
        assert worker.stop(grace=30) == 0, worker.tail()
        states = users_changelog(bootstrap, topics.app_id)
        assert states["a"]["counts"] == [0, 0, 0, 1, 0, 0], states
        assert committed(bootstrap, topics.app_id, topics.reports) == {0: 1}
    finally:
        worker.stop()
