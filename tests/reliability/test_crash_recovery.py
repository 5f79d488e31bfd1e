"""SIGKILL a worker mid-stream; the restarted worker (or the survivor of two) must lose nothing,
count nothing twice, never lower epsilon_spent, and never publish one seq with two values.

How the running sum is observed without a product hook: the worker runs with epsilon = 1e6 per
release (configuration only), so theta = max|a| / eps <= 5e-6 and the discrete Laplace noise on
the 2**-10 grid is 0 except with probability ~e^-200: the release's noisy_sum must equal the
true sum (checked within laplace_bound(theta), i.e. exactly). Histograms and report ids are
read from the users table's changelog topic (what a restarted worker recovers from).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from stream_app.broker import EmbeddedBroker, free_port
from tests.reliability.harness import (
    Topics,
    Worker,
    check_journal,
    create,
    laplace_bound,
    produce_raw,
    read_json,
    users_changelog,
    wait_consumed,
    wait_ready,
    wait_until,
    worker_env,
)
from tests.reliability.workload import Workload, accepted_total, histogram_mismatches

pytestmark = [pytest.mark.integration]

EXACT_SUM_SETTINGS = {
    "PUFFERFISH_EPSILON": "1000000",
    "PUFFERFISH_BUDGET_TOTAL": "1e12",
    "PUFFERFISH_RELEASE_PERIOD_SECONDS": "0.5",
    "PUFFERFISH_PAIRS": '["value_presence"]',
    "PUFFERFISH_LOG_LEVEL": "info",
}


def _wait_for_sum(broker: EmbeddedBroker, topics: Topics, expected: int, worker: Worker,
                  timeout: float = 90.0) -> list[dict[str, Any]]:
    """Wait until the newest release shows `expected` and stays there for 3 more releases."""
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
        wait_until(settled, timeout, f"release noisy_sum == {expected}", 1.0, worker)
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


@pytest.mark.timeout(180)
def test_sigkill_mid_stream_then_restart(broker_module: EmbeddedBroker, tmp_path: Path) -> None:
    broker = broker_module
    topics = Topics(partitions=2)
    create(broker.bootstrap, topics)
    wl = Workload.make(n_users=40, per_user=100, dup_every=25, seed=7)
    first, second = wl.reports[:2000], wl.reports[2000:]
    dups_first = [d for d in wl.duplicates if d in set(first)]
    dups_second = [d for d in wl.duplicates if d not in set(first)]

    env = worker_env(broker.url, topics, tmp_path / "data", EXACT_SUM_SETTINGS)
    w1 = Worker(env, tmp_path, "before-crash").start()
    try:
        wait_ready(w1)
        produce_raw(broker.bootstrap, wl.joins(topics))
        wait_consumed(w1, "join", len(wl.users))
        produce_raw(broker.bootstrap,
                    Workload.encode(topics, first) + Workload.encode(topics, dups_first))
        # Kill while the worker is in the middle of the first batch.
        wait_consumed(w1, "report", 500, timeout=60)
        consumed_at_kill = w1.metric("pufferfish_events_consumed_total", {"kind": "report"})
        releases_before = read_json(broker.bootstrap, topics.releases, timeout=1.0)
        w1.kill9()
    finally:
        w1.kill9()
    assert consumed_at_kill is not None and consumed_at_kill < len(first), (
        "the kill was not mid-stream; raise the workload size"
    )
    eps_before = max((r["epsilon_spent"] for r in releases_before), default=0.0)

    produce_raw(broker.bootstrap,
                Workload.encode(topics, second) + Workload.encode(topics, dups_second))
    env2 = dict(env)
    env2["PUFFERFISH_METRICS_PORT"] = str(free_port())
    env2["PUFFERFISH_WEB_PORT"] = str(free_port())
    w2 = Worker(env2, tmp_path, "after-restart").start()
    try:
        wait_ready(w2)
        releases = _wait_for_sum(broker, topics, wl.expected_sum(), w2)
        states = users_changelog(broker.bootstrap, topics.app_id)
        deadletters = read_json(broker.bootstrap, topics.deadletter, timeout=1.5)
    finally:
        w2.stop()

    journal = check_journal(releases)
    reasons = Counter(d["reason"] for d in deadletters)
    accepted = accepted_total(states)
    _summary("sigkill-restart", sent_reports=len(wl.reports), sent_duplicates=len(wl.duplicates),
             killed_after_reports=consumed_at_kill, accepted=accepted,
             deadlettered=len(deadletters), duplicates_absorbed=reasons["duplicate_report"] + reasons["already_present"],
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
def test_two_workers_one_killed_survivor_takes_over(broker_module: EmbeddedBroker,
                                                    tmp_path: Path) -> None:
    broker = broker_module
    topics = Topics(partitions=4)
    create(broker.bootstrap, topics)
    wl = Workload.make(n_users=40, per_user=60, dup_every=20, seed=11, prefix="t")
    first, second = wl.reports[:1200], wl.reports[1200:]
    first_set = set(first)
    env_a = worker_env(broker.url, topics, tmp_path / "data-a", EXACT_SUM_SETTINGS)
    env_b = worker_env(broker.url, topics, tmp_path / "data-b", EXACT_SUM_SETTINGS)
    wa = Worker(env_a, tmp_path, "survivor").start()
    wb = Worker(env_b, tmp_path, "victim").start()
    try:
        wait_ready(wa)
        wait_ready(wb)
        produce_raw(broker.bootstrap, wl.joins(topics))

        def joins_seen() -> bool:
            got = [w.metric("pufferfish_events_consumed_total", {"kind": "join"}) or 0
                   for w in (wa, wb)]
            return sum(got) >= len(wl.users) and all(g > 0 for g in got)

        # Both workers must own input partitions before the kill, or the test proves nothing.
        wait_until(joins_seen, 90, "both workers consuming joins", 0.5, wa)
        produce_raw(broker.bootstrap, Workload.encode(topics, first) + Workload.encode(
            topics, [d for d in wl.duplicates if d in first_set]))
        wait_until(lambda: (wb.metric("pufferfish_events_consumed_total",
                                      {"kind": "report"}) or 0) >= 100,
                   60, "victim processing reports", 0.1, wb)
        victim_reports = wb.metric("pufferfish_events_consumed_total", {"kind": "report"})
        releases_before = read_json(broker.bootstrap, topics.releases, timeout=1.0)
        wb.kill9()
        produce_raw(broker.bootstrap, Workload.encode(topics, second) + Workload.encode(
            topics, [d for d in wl.duplicates if d not in first_set]))
        releases = _wait_for_sum(broker, topics, wl.expected_sum(), wa, timeout=120)
        states = users_changelog(broker.bootstrap, topics.app_id)
        deadletters = read_json(broker.bootstrap, topics.deadletter, timeout=1.5)
        assert wa.alive(), wa.tail()
    finally:
        wb.kill9()
        wa.stop()

    eps_before = max((r["epsilon_spent"] for r in releases_before), default=0.0)
    journal = check_journal(releases)
    reasons = Counter(d["reason"] for d in deadletters)
    accepted = accepted_total(states)
    _summary("two-workers-one-killed", sent_reports=len(wl.reports),
             sent_duplicates=len(wl.duplicates), victim_reports_before_kill=victim_reports,
             accepted=accepted, deadlettered=len(deadletters),
             duplicates_absorbed=reasons["duplicate_report"] + reasons["already_present"], lost=len(wl.reports) - accepted,
             releases=journal.releases, identical_seq_repeats=journal.identical_repeats)
    assert histogram_mismatches(wl, states) == {}
    assert accepted == len(wl.reports)
    _assert_only_redelivery(reasons, wl)
    assert journal.conflicting_seqs == [], f"seqs published with two values: {journal}"
    assert journal.eps_decreases == [], f"epsilon_spent went down: {journal.eps_decreases}"
    assert min(r["epsilon_spent"] for r in releases if r not in releases_before) >= eps_before
