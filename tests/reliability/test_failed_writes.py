"""A write the broker never acknowledges: the worker stops before the batch's input offsets are
committed, and the restarted worker ends in the state the input dictates.

The first worker runs the product with one producer send failing (tests/reliability/
failing_sends.py: the send is never transmitted, its future fails as an expired aiokafka batch):
the changelog record of one user, or the first dead letter, in the middle of the second batch
of input. The expected states and the sum are computed here from the records the test sent;
committed offsets are read from the broker (the consumer group's OffsetFetch).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from stream_app.demo.broker import EmbeddedBroker
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    Topics,
    Worker,
    committed,
    laplace_bound,
    new_topics,
    read_all_json,
    read_json,
    users_changelog,
    wait_ready,
    wait_until,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PARTITIONS = 2
DOMAIN = (0, 1, 2, 3, 4, 5)
GRID_LOG2 = -10
USERS = [f"user-{i:02d}" for i in range(60)]
FIRST, SECOND = USERS[:30], USERS[30:]  # two runs of input: one committed, one failing
VICTIM = "user-45"  # its changelog record is the one lost (mid second run)
MALFORMED = b'{"user_id": "user-45", "value": '  # its dead letter is the one lost
EXIT_WRITE_NOT_ACKNOWLEDGED = 75  # the runner's documented exit status
STOP_LINE = "stopping the worker: a {what} record was not acknowledged by the broker"


def value_of(user: str) -> int:
    return int(user.rsplit("-", 1)[1]) % 5 + 1  # never 0: a lost state changes the sum


def report(user: str) -> bytes:
    return json.dumps({"user_id": user, "value": value_of(user), "report_id": f"{user}-r0",
                       "ts": 1.0}).encode()


async def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]
                   ) -> list[tuple[int, int]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        return [(md.partition, md.offset) for md in await asyncio.gather(*futures)]
    finally:
        await producer.stop()


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]
            ) -> list[tuple[int, int]]:
    """Send keyed records in order; (partition, offset) of each."""
    return asyncio.run(_produce(bootstrap, topic, records))


def ends(placed: list[tuple[int, int]]) -> dict[int, int]:
    """Per partition, the offset after the last of these records."""
    out: dict[int, int] = {}
    for partition, offset in placed:
        out[partition] = max(out.get(partition, 0), offset + 1)
    return out


def expected_state(user: str) -> dict[str, Any]:
    counts = [0] * len(DOMAIN)
    counts[DOMAIN.index(value_of(user))] = 1
    return {"present": True, "group": "g", "value_units": value_of(user) * 2 ** -GRID_LOG2,
            "counts": counts}


def state_mismatches(states: dict[str, dict[str, Any]]) -> dict[str, Any]:
    bad: dict[str, Any] = {}
    for user in USERS:
        got = states.get(user)
        want = expected_state(user)
        seen = {k: got.get(k) for k in want} if got is not None else None
        if seen != want:
            bad[user] = seen
    return bad


def wait_for_sum(bootstrap: str, topics: Topics, expected: int, worker: Worker) -> None:
    """The newest release shows `expected` (the noise is ~0 at EXACT_SUM_SETTINGS' epsilon)."""
    def settled() -> bool:
        recs = read_json(bootstrap, topics.releases, timeout=1.0)
        return bool(recs) and abs(recs[-1]["noisy_sum"] - expected) <= laplace_bound(
            recs[-1]["theta"])

    wait_until(settled, 90, f"a release with noisy_sum == {expected}", 1.0, worker)


def exit_code(worker: Worker, timeout: float) -> int | None:
    """The worker's exit status once it exits by itself within `timeout` s, else None."""
    assert worker.proc is not None
    try:
        return worker.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


class FailingWorker(Worker):
    entry = ("-m", "tests.reliability.failing_sends")


NO_PERIODIC_COMMIT = {"PUFFERFISH_BROKER_COMMIT_INTERVAL_SECONDS": "3600"}


@pytest.mark.slow
@pytest.mark.parametrize(("what", "extra", "store"), [
    ("changelog", {}, "memory://"),
    # RocksDB keeps its state on disk: the lost state must not be there after the restart
    pytest.param("changelog", {}, "rocksdb://", id="changelog-rocksdb"),
    ("dead letter", {}, "memory://"),
    # the consumer's thread stops its method queue, then lingers; the stop's commit comes then
    pytest.param("changelog", {"FAILING_SEND_THREAD_LINGER": "3"}, "memory://",
                 id="changelog-slow-thread-stop"),
    # the first run's offsets are acked, never committed by a timer: the stop commits them
    pytest.param("changelog", NO_PERIODIC_COMMIT, "memory://",
                 id="changelog-committed-at-the-stop"),
])
def test_unacknowledged_write_stops_before_the_commit(
    broker_module: EmbeddedBroker, tmp_path: Path, what: str, extra: dict[str, str], store: str
) -> None:
    bootstrap = broker_module.bootstrap
    topics = new_topics(bootstrap, PARTITIONS)
    env = worker_env(broker_module.url, topics, tmp_path / "data", {
        **EXACT_SUM_SETTINGS, "PUFFERFISH_AUTO_JOIN": "true", "PUFFERFISH_GROUPS": '["g"]',
        "PUFFERFISH_GRID_LOG2": str(GRID_LOG2), "PUFFERFISH_DEADLETTER_INCLUDE_RAW": "true",
    }, store)
    if what == "changelog":
        fault = {"FAILING_SEND_TOPIC": f"{topics.app_id}-users-changelog",
                 "FAILING_SEND_KEY": json.dumps(VICTIM)}
    else:
        fault = {"FAILING_SEND_TOPIC": topics.deadletter}
    failing = FailingWorker({**env, **fault, **extra}, tmp_path, "failing").start()
    restarted: Worker | None = None
    try:
        wait_ready(failing)
        first = produce(bootstrap, topics.reports, [(u.encode(), report(u)) for u in FIRST])
        first_ends = ends(first)
        if extra is NO_PERIODIC_COMMIT:
            wait_until(lambda: all(u in users_changelog(bootstrap, topics.app_id, to_end=False)
                                   for u in FIRST),
                       60, "the first run's states in the changelog", 0.5, failing)
            # their window is written: the failing one waits for it, which acks its events
            assert not committed(bootstrap, topics.app_id, topics.reports)
        else:
            wait_until(lambda: committed(bootstrap, topics.app_id, topics.reports) == first_ends,
                       60, f"the first run's offsets committed ({first_ends})", 0.5, failing)

        second = [(u.encode(), report(u)) for u in SECOND]
        at = SECOND.index(VICTIM)
        second.insert(at + 1, (VICTIM.encode(), MALFORMED))
        placed = produce(bootstrap, topics.reports, second)
        victim = placed[at] if what == "changelog" else placed[at + 1]

        # it stops by itself; one that goes on is stopped here, then its commits are checked
        code = exit_code(failing, 60)
        hung = ""
        if code is None:
            hung = failing.diagnose()  # what it waits on, while it still runs
            failing.stop()
        after = committed(bootstrap, topics.app_id, topics.reports)
        partition, offset = victim
        assert after.get(partition, 0) <= offset, (
            f"offsets {after} committed past the lost write (reports[{partition}]@{offset})")
        assert all(after.get(p, 0) >= end for p, end in first_ends.items()), (after, first_ends)
        output = failing.output()
        assert code == EXIT_WRITE_NOT_ACKNOWLEDGED, f"exit {code}:\n{hung or failing.tail()}"
        stop_lines = [ln for ln in output.splitlines() if STOP_LINE.format(what=what) in ln]
        assert len(stop_lines) == 1, output[-4000:]
        # the stop says why in one line: the crash that follows is not logged as news again
        errors = [ln for ln in output.splitlines() if "[ERROR]" in ln or "[CRITICAL]" in ln]
        assert errors == stop_lines, output[-4000:]
        assert "Traceback" not in output, output[-4000:]
        assert VICTIM not in output and "value_units" not in output

        restarted = Worker(env, tmp_path, "restarted").start()
        wait_ready(restarted)
        wait_until(lambda: not state_mismatches(users_changelog(bootstrap, topics.app_id,
                                                                to_end=False)),
                   90, "every user's state in the changelog as the input dictates", 1.0,
                   restarted)
        wait_for_sum(bootstrap, topics, sum(value_of(u) for u in USERS), restarted)
        letters = [d for d in read_all_json(bootstrap, topics.deadletter)
                   if d["source_topic"] == topics.reports and d["reason"] == "malformed_json"]
        assert letters and all(d["raw"] == MALFORMED.decode() for d in letters), letters
        assert restarted.stop() == 0, restarted.tail()
    finally:
        failing.stop()
        if restarted is not None:
            restarted.stop()
