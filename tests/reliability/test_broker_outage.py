"""The broker process goes away for 20 s and comes back.

- On a broker that keeps its log (Apache Kafka; noida-db, data on disk): the worker must not
  crash, must count the broker errors, and must resume where it was: the new reports are
  applied on top of the old state (exact sum), and the releases of both broker lives keep
  distinct, increasing seqs and a monotone epsilon_spent.
- On the memory broker (tansu) the restarted broker is empty and the topics are re-created at
  offset 0, below the positions the worker already holds, so whether the worker ever sees the
  new reports is a race: that variant only checks what it can show honestly (no crash or one
  clear error, errors counted, no release with a sum that was never true, no conflicting seq).

"A sum that was true": the worker applies input in batches, per input partition, and a release
combines the latest partial aggregate of each partition, so a release may fall between two
batches and show an in-between sum that was true at that moment (see `_states`).
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.kafka.partitioning import partition_for
from tests.kafka_broker import KafkaBroker
from tests.noida_broker import NoidaBroker
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    KAFKA,
    Broker,
    Topics,
    Worker,
    check_journal,
    compat_for,
    create,
    join,
    laplace_bound,
    new_topics,
    produce_raw,
    read_json,
    report,
    wait_for_records,
    wait_ready,
    worker_env,
)

pytestmark = [pytest.mark.integration]

OUTAGE_SECONDS = 20.0  # longer than the release producer's 15 s request timeout
PARTITIONS = 2  # of the input topics
USERS = [f"o{i}" for i in range(5)]
FIRST = {u: i for i, u in enumerate(USERS)}  # each user's report before the outage
SECOND = {u: 5 for u in USERS}  # every user reports 5 after the outage
SUM_BEFORE = sum(FIRST.values())  # 0 + 1 + 2 + 3 + 4
SUM_AFTER = sum(SECOND.values())  # 5 * 5


def _by_partition() -> list[list[str]]:
    """USERS by input partition, in the order the test sends them (the input contract's
    partition: keys are the user ids)."""
    by_partition: list[list[str]] = [[] for _ in range(PARTITIONS)]
    for u in USERS:
        by_partition[partition_for(u.encode(), PARTITIONS)].append(u)
    return by_partition


def _states(*stages: Mapping[str, int]) -> dict[tuple[int, ...], int]:
    """The sums that are true while every user goes through its contributions `stages[0]`,
    `stages[1]`, ..., by how far each input partition has got -> the sum then.

    A user's contribution is its latest value while present (a joined user without a report
    adds 0: docs/privacy.md, "Model"). The users of one partition are applied in the order of
    their records there, i.e. the order the test sent them in (one producer, in order), so
    within a stage a partition's state is "its first k users have the next contribution"; the
    partitions progress independently and a release combines one partial of each, so every
    combination of the partitions' states is a state that could have been true.
    """
    progress = []
    for users in _by_partition():
        sums = [sum(stages[0][u] for u in users)]
        for old, new in itertools.pairwise(stages):
            sums += [sum(new[u] for u in users[:k]) + sum(old[u] for u in users[k:])
                     for k in range(1, len(users) + 1)]
        progress.append(sums)
    return {ks: sum(p[k] for p, k in zip(progress, ks, strict=True))
            for ks in itertools.product(*(range(len(p)) for p in progress))}


# Before the outage every user goes from "joined, no report" (0) to its first report; after it,
# from its first report to its second. o0, o2, o4 share partition 0 (in that order), o1, o3
# partition 1, so the true sums are {0, 1, 2, 3, 4, 6, 7, 10} before the outage (not 5, 8 or
# 9: e.g. 5 = 1 + 4 would need o4's report applied before o2's) and {10, 14, 15, 16, 18, 19,
# 21, 22, 23, 24, 25} after it. A sum in neither set was never true: a report applied twice,
# lost, or a second report undone.
NO_REPORT = {u: 0 for u in USERS}
BEFORE_STATES = _states(NO_REPORT, FIRST)
AFTER_STATES = _states(FIRST, SECOND)
SUMS_BEFORE = set(BEFORE_STATES.values())
SUMS_EVER = SUMS_BEFORE | set(AFTER_STATES.values())


# the whole run (the log-kept test): every first report is applied before the outage (the test
# waits for SUM_BEFORE first), then the second ones
RUN_STATES = _states(NO_REPORT, FIRST, SECOND)


def _shows(expected: int, rec: dict[str, Any]) -> bool:
    return abs(rec["noisy_sum"] - expected) <= laplace_bound(rec["theta"])


def _never_true(releases: list[dict[str, Any]], sums: set[int]) -> list[dict[str, Any]]:
    """The releases showing none of `sums`."""
    return [r for r in releases if not any(_shows(s, r) for s in sums)]


def _not_monotone(releases: list[dict[str, Any]], states: dict[tuple[int, ...], int]
                  ) -> list[dict[str, Any]]:
    """[] if some sequence of partition states, each partition only moving forward, explains
    the releases in order (a sum can come from several states: every candidate is kept); else
    the releases up to the first one no such sequence explains."""
    reachable = {tuple(0 for _ in range(PARTITIONS))}
    for i, rec in enumerate(releases):
        reachable = {ks for ks, total in states.items() if _shows(total, rec)
                     and any(all(a <= b for a, b in zip(prev, ks, strict=True))
                             for prev in reachable)}
        if not reachable:
            return releases[:i + 1]
    return []


def _check_first_life(life1: list[dict[str, Any]]) -> None:
    """The releases before the outage: one worker, one assignment, the partials collected in
    the order they were sent, so each partition's part only moves forward. (Across the outage
    of a broker that keeps its log this holds too and is checked there; the memory broker's
    log starts again from offset 0.)"""
    wrong = _never_true(life1, SUMS_BEFORE)
    assert wrong == [], f"releases before the outage with a sum that was never true: {wrong}"
    back = _not_monotone(life1, BEFORE_STATES)
    assert back == [], f"releases before the outage going back: {back}"


def _last_shows(expected: int) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda recs: bool(recs) and _shows(expected, recs[-1])


def _start(tmp_path: Path, broker: Broker) -> tuple[Topics, Worker, list[dict[str, Any]]]:
    """A worker with 5 joined users whose reports sum to SUM_BEFORE, released once."""
    bootstrap = broker.bootstrap
    topics = new_topics(bootstrap, PARTITIONS)
    env = worker_env(broker.url, topics, tmp_path / "data", EXACT_SUM_SETTINGS,
                     compat=compat_for(broker))
    worker = Worker(env, tmp_path, "outage").start()
    wait_ready(worker)
    join(bootstrap, topics, worker, USERS)
    produce_raw(bootstrap, [(topics.reports, u.encode(), report(u, FIRST[u], f"{u}-a", 2.0))
                            for u in USERS])
    life1 = wait_for_records(bootstrap, topics.releases, _last_shows(SUM_BEFORE), 60,
                             f"sum {SUM_BEFORE} before the outage", worker)
    return topics, worker, life1


class Outage(NamedTuple):
    alive: list[bool]
    errors_before: float
    errors_during: float
    seen: str  # what the worker logged and waited on at the end of the outage, when no error


def _outage(worker: Worker) -> Outage:
    """The broker stays down OUTAGE_SECONDS (the scenario itself); the worker is sampled each
    second: alive?, and its broker error counter before and during the outage."""
    before = worker.metric("pufferfish_broker_errors_total") or 0.0
    alive, during = [], before
    deadline = time.monotonic() + OUTAGE_SECONDS
    while time.monotonic() < deadline:
        time.sleep(1.0)
        alive.append(worker.alive())
        if worker.alive():
            during = worker.metric("pufferfish_broker_errors_total") or during
    return Outage(alive, before, during, worker.diagnose() if during <= before else "")


def _new_reports(bootstrap: str, topics: Topics) -> None:
    produce_raw(bootstrap, [(topics.reports, u.encode(), report(u, SECOND[u], f"{u}-b", 3.0))
                            for u in USERS])


def _no_traceback(worker: Worker) -> str:
    log = worker.output()
    assert "Traceback" not in log, log[-3000:]
    return log


def _log_keeping_broker(kind: str, tmp_path: Path) -> NoidaBroker | KafkaBroker:
    """A broker of its own (the test stops it): noida-db, or Apache Kafka with its ZooKeeper
    (both restart on the same port with their log)."""
    if kind == "kafka":
        return KafkaBroker(tmp_path / "kafka").start()
    return NoidaBroker(tmp_path / "noida", tmp_path / "noida.log").start()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["noida-db", KAFKA])
def test_broker_keeping_its_log_restarted_worker_resumes_exactly(tmp_path: Path,
                                                                 kind: str) -> None:
    broker = _log_keeping_broker(kind, tmp_path)
    worker: Worker | None = None
    try:
        topics, worker, life1 = _start(tmp_path, broker)
        broker.stop()
        outage = _outage(worker)
        broker.start()  # same port, same data directory: the log and the topics are back
        _new_reports(broker.bootstrap, topics)
        try:
            releases = wait_for_records(broker.bootstrap, topics.releases,
                                        _last_shows(SUM_AFTER), 120,
                                        f"sum {SUM_AFTER} after the broker came back", worker)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{worker.diagnose()}") from None
        assert worker.alive(), worker.tail()
    finally:
        if worker is not None:
            worker.stop()
        broker.stop()
    _no_traceback(worker)

    print(f"\nRELIABILITY broker-outage (log kept, {kind}): releases before={len(life1)}, in all="
          f"{len(releases)}, broker_errors before/during="
          f"{outage.errors_before}/{outage.errors_during}")
    assert all(outage.alive), outage.alive
    assert outage.errors_during > outage.errors_before, (
        f"pufferfish_broker_errors_total did not move during the outage:\n{outage.seen}")
    # the log kept the releases of the first life: one journal across both lives
    assert releases[:len(life1)] == life1
    journal = check_journal(releases)
    assert journal.conflicting_seqs == [], journal
    assert journal.eps_decreases == [], journal
    seqs = [int(r["seq"]) for r in releases]
    assert seqs == sorted(set(seqs)), f"seqs repeated or out of order: {seqs}"
    _check_first_life(life1)
    wrong = _never_true(releases, SUMS_EVER)
    assert wrong == [], f"releases with a sum that was never true: {wrong}"
    # across the outage too: the partials topic is read again from an older offset (the
    # group's commits failed) and collect keeps the newest partial (release/partials_log.py)
    back = _not_monotone(releases, RUN_STATES)
    assert back == [], f"releases going back to an older sum: {back[-3:]}"
    # once the new reports are applied the sum stays exact: nothing applied twice
    first_after = next(i for i, r in enumerate(releases) if _shows(SUM_AFTER, r))
    assert all(_shows(SUM_AFTER, r) for r in releases[first_after:]), releases[first_after:]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_memory_broker_restarted_empty_no_crash_no_wrong_release(tmp_path: Path) -> None:
    # started again below on the port it got now (EmbeddedBroker), where the worker looks for it
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    worker: Worker | None = None
    life2: list[dict[str, Any]] = []
    try:
        topics, worker, life1 = _start(tmp_path, broker)
        broker.stop()
        outage = _outage(worker)
        # The restarted memory broker is empty: re-create the topics before the worker can
        # reach it, or its first send auto-creates `releases` with tansu's default of 4
        # partitions. The worker is paused (SIGSTOP) only for the restart-and-create step.
        paused = worker.alive()
        if paused:
            os.killpg(worker.pid, signal.SIGSTOP)
        try:
            broker.start()
            create(broker.bootstrap, topics)
        finally:
            if paused:
                os.killpg(worker.pid, signal.SIGCONT)
        exited_code = None if worker.alive() else worker.proc.returncode  # type: ignore[union-attr]
        if exited_code is None:
            _new_reports(broker.bootstrap, topics)
            # the release clock goes on: two releases on the fresh topic (whatever they show)
            life2 = wait_for_records(broker.bootstrap, topics.releases,
                                     lambda recs: len(recs) >= 2, 90,
                                     "two releases after the broker came back", worker)
            life2 = read_json(broker.bootstrap, topics.releases, timeout=1.0) or life2
    finally:
        code = worker.stop() if worker is not None else None
        broker.stop()
    log = _no_traceback(worker)

    journal = check_journal(life1 + life2)
    print(f"\nRELIABILITY broker-outage (memory broker): releases_before={len(life1)}, "
          f"after={len(life2)}, alive_during={all(outage.alive)}, broker_errors before/during="
          f"{outage.errors_before}/{outage.errors_during}, exit={exited_code}, stop_code={code}")
    _check_first_life(life1)
    if exited_code is not None:
        assert "pufferfish: error:" in log, "the worker exited without a clear error"
        return
    assert all(outage.alive), outage.alive
    assert outage.errors_during > outage.errors_before, (
        f"pufferfish_broker_errors_total did not move during the outage:\n{outage.seen}")
    assert journal.conflicting_seqs == [], journal
    assert journal.eps_decreases == [], journal
    wrong = _never_true(life2, SUMS_EVER)
    assert wrong == [], f"releases with a sum that was never true: {wrong}"
