"""SIGKILL a worker mid-stream; the restarted worker (or the survivor of two) must lose nothing,
count nothing twice, never lower epsilon_spent, and never publish one seq with two values.

How the running sum is observed without a product hook: the worker runs with epsilon = 1e6 per
release (configuration only), so theta = max|a| / eps <= 5e-6 and the discrete Laplace noise on
the 2**-10 grid is 0 except with probability ~e^-200: the release's noisy_sum must equal the
true sum (checked within laplace_bound(theta), i.e. exactly). Histograms and report ids are
read from the users table's changelog topic (what a restarted worker recovers from).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from stream_app.demo.broker import EmbeddedBroker
from tests.kafka_helpers import PacedProducer
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    PROBE_SETTINGS,
    STORES,
    Broker,
    Topics,
    Worker,
    accepted_total,
    check_journal,
    compat_for,
    laplace_bound,
    new_topics,
    not_probes,
    on_brokers,
    owns_input,
    produce_raw,
    read_all_json,
    read_json,
    users_changelog,
    wait_consumed,
    wait_counted,
    wait_for_records,
    wait_ready,
    wait_until,
    worker_env,
)
from tests.reliability.workload import Workload, histogram_mismatches

pytestmark = [pytest.mark.integration]

def _wait_for_sum(broker: Broker, topics: Topics, wl: Workload, worker: Worker,
                  timeout: float = 90.0) -> list[dict[str, Any]]:
    """Wait until the users changelog counts every report of `wl` (counts only grow), then
    until the newest release shows `wl`'s sum and stays there for 3 more releases.

    The sum alone cannot tell the final state from a stale one whose newest values happen to
    add up to the same total: with seed 23 the rebalance test's users' values of round 66 sum
    to 98, as do those of round 99, so a worker that had not yet applied the last third passed
    the sum wait and the changelog was read before it caught up (a CI failure, 33 report ids
    missing for every user)."""
    expected = wl.expected_sum()
    deadline = time.monotonic() + timeout

    wait_counted(broker.bootstrap, topics, len(wl.reports), worker, timeout)
    state: dict[str, Any] = {"last": None}

    def settled() -> bool:
        recs = read_json(broker.bootstrap, topics.releases, timeout=1.0)
        if not recs:
            return False
        state["last"] = recs[-1]
        hits = 0
        for rec in reversed(recs):
            if abs(rec["noisy_sum"] - expected) > laplace_bound(rec["theta"]):
                break
            hits += 1
        state["recs"] = recs
        return hits >= 4

    try:
        wait_until(settled, max(deadline - time.monotonic(), 10.0),
                   f"release noisy_sum == {expected}", 1.0, worker)
    except AssertionError as exc:
        last = state["last"]
        raise AssertionError(
            f"running sum never settled on {expected}; newest release: {last}\n{exc}"
        ) from None
    return list(state["recs"])


def _assert_only_redelivery(reasons: Counter[str], wl: Workload) -> None:
    """Dead letters may only be absorbed duplicates: the re-sent reports, and whatever the
    crash made the broker redeliver (reports -> duplicate_report, joins -> already_present)."""
    assert set(reasons) <= {"duplicate_report", "already_present"}, reasons
    assert reasons["duplicate_report"] >= len(wl.duplicates)
    assert reasons["already_present"] <= len(wl.users)


def _summary(name: str, **counts: Any) -> None:
    print(f"\nRELIABILITY {name}: " + ", ".join(f"{k}={v}" for k, v in counts.items()))


def _release_owner(workers: list[Worker]) -> Worker | None:
    """The one worker whose releases counter moves during a window of >= 2 release periods
    (None while no single owner is visible; the caller polls this with wait_until)."""
    before = [w.metric("pufferfish_releases_total") or 0 for w in workers]
    time.sleep(1.2)  # the measurement window itself: 2.4 release periods of 0.5 s
    after = [w.metric("pufferfish_releases_total") or 0 for w in workers]
    moved = [w for w, x, y in zip(workers, before, after, strict=True) if y > x]
    return moved[0] if len(moved) == 1 else None


# Mid-stream kills: a PacedProducer feeds the reports (CHUNK per PACE seconds) while the test
# waits for its kill trigger, and holds the last chunks back until after the kill, so input is
# still arriving when the worker dies and some of it is certainly unsent, whatever its speed.
CHUNK, PACE = 50, 0.1


@pytest.mark.timeout(240)
@pytest.mark.slow
@pytest.mark.parametrize("store", STORES, ids=lambda s: s.split(":")[0])
def test_sigkill_mid_stream_then_restart(each_broker: Broker, tmp_path: Path,
                                         store: str) -> None:
    broker = each_broker
    topics = new_topics(broker.bootstrap, 2)
    wl = Workload.make(n_users=40, per_user=100, dup_every=25, seed=7)
    chunks = wl.feed(topics, wl.reports, CHUNK)

    env = worker_env(broker.url, topics, tmp_path / "data", EXACT_SUM_SETTINGS, store,
                     compat_for(broker))
    w1 = Worker(env, tmp_path, "before-crash").start()
    try:
        wait_ready(w1)
        produce_raw(broker.bootstrap, wl.joins(topics))
        wait_consumed(w1, "membership", len(wl.users))
        with PacedProducer(broker.bootstrap, chunks, hold=len(chunks) // 4, pace=PACE) as feed:
            # Kill once the changelog (what a restart recovers) shows >= 500 accepted reports.
            wait_counted(broker.bootstrap, topics, 500, w1, 90, step=0.1)
            consumed_at_kill = w1.metric("pufferfish_events_applied_total", {"kind": "report"})
            w1.kill9()
            feed.release()  # the rest of the workload arrives while no worker runs
    finally:
        w1.kill9()
    # The kill point, from what the dead worker left in the changelog (no worker writes now).
    accepted_at_kill = accepted_total(users_changelog(broker.bootstrap, topics.app_id))
    assert 0 < accepted_at_kill < len(wl.reports), (
        f"the kill was not mid-stream: {accepted_at_kill} of {len(wl.reports)} reports accepted "
        f"(sent at the kill: {feed.sent_at_release} of {feed.total} records)"
    )
    releases_before = read_all_json(broker.bootstrap, topics.releases)
    eps_before = max((r["epsilon_spent"] for r in releases_before), default=0.0)

    w2 = Worker(env, tmp_path, "after-restart").start()
    try:
        wait_ready(w2)
        releases = _wait_for_sum(broker, topics, wl, w2)
        states = users_changelog(broker.bootstrap, topics.app_id)
        deadletters = read_all_json(broker.bootstrap, topics.deadletter)
    finally:
        w2.stop()

    journal = check_journal(releases)
    reasons = Counter(d["reason"] for d in deadletters)
    accepted = accepted_total(states)
    absorbed = reasons["duplicate_report"] + reasons["already_present"]
    _summary("sigkill-restart", sent_reports=len(wl.reports), sent_duplicates=len(wl.duplicates),
             killed_after_reports=consumed_at_kill, accepted_at_kill=accepted_at_kill,
             sent_at_kill=feed.sent_at_release, accepted=accepted,
             deadlettered=len(deadletters), duplicates_absorbed=absorbed,
             lost=len(wl.reports) - accepted, releases=journal.releases,
             identical_seq_repeats=journal.identical_repeats, eps_before_crash=eps_before)
    assert histogram_mismatches(wl, states) == {}
    assert accepted == len(wl.reports)
    _assert_only_redelivery(reasons, wl)
    assert journal.conflicting_seqs == [], f"seqs published with two values: {journal}"
    assert journal.eps_decreases == [], f"epsilon_spent went down: {journal.eps_decreases}"
    after = [r for r in releases if r not in releases_before]
    assert after and min(r["epsilon_spent"] for r in after) >= eps_before


@pytest.mark.timeout(240)
@pytest.mark.slow
# on Kafka the memory store (the survivor restores the dead worker's users from the changelog):
# RocksDB with standbys is test_standby_failover.py's and test_takeover_input.py's
@pytest.mark.parametrize(("store", "each_broker"), on_brokers(
    ("memory://", "tansu"), ("rocksdb://", "tansu"), ("memory://", "kafka")),
    indirect=["each_broker"])
def test_two_workers_one_killed_survivor_takes_over(each_broker: Broker,
                                                    tmp_path: Path, store: str) -> None:
    broker = each_broker
    topics = new_topics(broker.bootstrap, 4)
    wl = Workload.make(n_users=40, per_user=60, dup_every=20, seed=11, prefix="t")
    # probes tell when both workers own input partitions (refused at once, told apart by raw)
    settings = {**EXACT_SUM_SETTINGS, **PROBE_SETTINGS}
    env_a, env_b = (worker_env(broker.url, topics, tmp_path / f"data-{n}", settings, store,
                               compat_for(broker)) for n in "ab")
    wa = Worker(env_a, tmp_path, "worker-a").start()
    wb = Worker(env_b, tmp_path, "worker-b").start()
    try:
        wait_ready(wa)
        wait_ready(wb)
        # Both workers must own input partitions before the kill, or the test proves nothing.
        # The group decides when: Kafka gives the first member every partition at once and
        # moves some to the second only once it joined (seconds later on a busy machine), so
        # the joins wait until both refused a probe (each owns an input partition).
        wait_until(lambda: owns_input(broker.bootstrap, topics, wa)
                   and owns_input(broker.bootstrap, topics, wb), 120,
                   "both workers owning input partitions", 1.0, wb)
        produce_raw(broker.bootstrap, wl.joins(topics))

        def joins_seen() -> bool:
            got = [w.metric("pufferfish_events_applied_total", {"kind": "membership"}) or 0
                   for w in (wa, wb)]
            return sum(got) >= len(wl.users) and all(g > 0 for g in got)

        wait_until(joins_seen, 90, "both workers consuming joins", 0.5, wa)
        warm = wl.reports[:len(wl.users)]
        produce_raw(broker.bootstrap, Workload.encode(topics, warm))  # theta > 0: releases start

        # Kill the worker that owns the release partition (the harder case: the survivor must
        # take over input partitions AND the release agent, and re-read the journal).
        victim = wait_until(lambda: _release_owner([wa, wb]), 60, "the release owner", 0.1, wa)
        survivor = wb if victim is wa else wa
        base = victim.metric("pufferfish_events_applied_total", {"kind": "report"}) or 0
        assert base > 0, "the release owner owns no input partition"
        chunks = wl.feed(topics, wl.reports[len(wl.users):], CHUNK)
        with PacedProducer(broker.bootstrap, chunks, hold=len(chunks) // 3, pace=PACE) as feed:
            wait_until(lambda: (victim.metric("pufferfish_events_applied_total",
                                              {"kind": "report"}) or 0) >= base + 150,
                       90, "the victim consuming 150 more reports", 0.05, victim)
            victim_reports = victim.metric("pufferfish_events_applied_total", {"kind": "report"})
            releases_before = read_json(broker.bootstrap, topics.releases, timeout=1.0)
            victim.kill9()
            feed.release()
        # mid-stream: the victim had taken part of the feed, and part of it was not even sent
        assert victim_reports is not None and victim_reports >= base + 150
        assert feed.sent_at_release is not None and feed.sent_at_release < feed.total
        releases = _wait_for_sum(broker, topics, wl, survivor, timeout=120)
        states = users_changelog(broker.bootstrap, topics.app_id)
        deadletters = not_probes(read_all_json(broker.bootstrap, topics.deadletter))
        assert survivor.alive(), survivor.tail()
    finally:
        for w in (wa, wb):
            w.stop()

    eps_before = max((r["epsilon_spent"] for r in releases_before), default=0.0)
    journal = check_journal(releases)
    reasons = Counter(d["reason"] for d in deadletters)
    accepted = accepted_total(states)
    absorbed = reasons["duplicate_report"] + reasons["already_present"]
    _summary("two-workers-one-killed", sent_reports=len(wl.reports),
             sent_duplicates=len(wl.duplicates), killed=f"{victim.name} (release owner)",
             victim_reports_before_kill=victim_reports,
             accepted=accepted, deadlettered=len(deadletters),
             duplicates_absorbed=absorbed, lost=len(wl.reports) - accepted,
             releases=journal.releases, identical_seq_repeats=journal.identical_repeats)
    assert histogram_mismatches(wl, states) == {}
    assert accepted == len(wl.reports)
    _assert_only_redelivery(reasons, wl)
    assert journal.conflicting_seqs == [], f"seqs published with two values: {journal}"
    assert journal.eps_decreases == [], f"epsilon_spent went down: {journal.eps_decreases}"
    assert min(r["epsilon_spent"] for r in releases if r not in releases_before) >= eps_before


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_paused_release_owner_does_not_publish_conflicting_seqs(broker_module: EmbeddedBroker,
                                                                tmp_path: Path) -> None:
    """SIGSTOP the release owner past the session timeout (a GC pause, a frozen VM), let the
    other worker take over and publish, then SIGCONT: the old owner must not publish a seq the
    new owner already used (with a different value), nor a lower epsilon_spent.

    Racy by nature: it fails only when the resumed worker's overdue release timer runs before
    its revocation callback (seen in 1 of 2 runs). A pass is not proof of fencing; a failure is
    always a real split-brain (no xfail: it must never fail once the product fences releases).

    The one exception is the documented remaining window (docs/design.md, "Release
    durability", Fences): a
    record the frozen owner had already drawn and handed to the Kafka client before the freeze
    can reach the broker after it resumes. Such a record has ts < the SIGSTOP time; every
    record drawn after the freeze must be fenced.
    """
    import os
    import signal

    broker = broker_module
    topics = new_topics(broker.bootstrap, 2)
    wl = Workload.make(n_users=10, per_user=3, dup_every=0, seed=5, prefix="z")
    first, second = wl.reports[:10], wl.reports[10:]
    workers = [Worker(worker_env(broker.url, topics, tmp_path / f"data-{n}", EXACT_SUM_SETTINGS),
                      tmp_path, f"pause-{n}").start() for n in ("a", "b")]
    stopped: Worker | None = None
    try:
        for w in workers:
            wait_ready(w)
        produce_raw(broker.bootstrap, wl.joins(topics))
        wait_until(lambda: sum(w.metric("pufferfish_events_applied_total", {"kind": "membership"})
                               or 0 for w in workers) >= len(wl.users),
                   60, "joins", 0.5, workers[0])
        produce_raw(broker.bootstrap, Workload.encode(topics, first))

        paused = wait_until(lambda: _release_owner(workers), 60, "the release owner", 0.1,
                            workers[0])
        other = workers[1] if paused is workers[0] else workers[0]
        paused_at = time.time()
        os.killpg(paused.pid, signal.SIGSTOP)
        stopped = paused
        wait_until(lambda: (other.metric("pufferfish_releases_total") or 0) > 0, 90,
                   "the other worker taking over the releases", 0.5, other)
        produce_raw(broker.bootstrap, Workload.encode(topics, second))  # the sum changes
        new_sum = wl.expected_sum()
        wait_for_records(broker.bootstrap, topics.releases, lambda recs: any(
            abs(r["noisy_sum"] - new_sum) <= laplace_bound(r["theta"]) for r in recs),
            90, f"the other worker publishing the new sum {new_sum}", other)
        os.killpg(paused.pid, signal.SIGCONT)
        stopped = None
        wait_ready(paused)  # its event loop runs again (SIGCONT delivered, metrics answer)
        # The scenario itself, not a wait for a condition: the window in which the resumed
        # worker's overdue timers may fire before it learns that it lost the group.
        time.sleep(5.0)
    finally:
        if stopped is not None:
            os.killpg(stopped.pid, signal.SIGCONT)
        for w in workers:
            w.stop()
    releases = read_all_json(broker.bootstrap, topics.releases)  # all publications, both workers
    journal = check_journal(releases)
    _summary("paused-owner", releases=journal.releases, distinct_seqs=journal.distinct_seqs,
             conflicting_seqs=journal.conflicting_seqs, eps_decreases=journal.eps_decreases,
             log=[(r["seq"], r["epsilon_spent"], round(r["ts"] % 1000, 2)) for r in releases])
    # late: drawn before the freeze (ts < paused_at) but logged after a record drawn after it
    seen_after, late = False, set()
    for r in releases:
        seen_after = seen_after or r["ts"] >= paused_at
        if seen_after and r["ts"] < paused_at:
            late.add(int(r["seq"]))
    unexplained = [q for q in journal.conflicting_seqs if q not in late]
    assert unexplained == [], (
        f"seqs published twice with different values, not by a record in flight at the "
        f"freeze: {unexplained} (all conflicts: {journal.conflicting_seqs}, late: {late})")
    assert all(seq in late for seq, _, _ in journal.eps_decreases), (journal.eps_decreases, late)
