"""The fixed bad-input corpus through a real worker, interleaved with good records.

Every bad record must come out as exactly one dead-letter record with the documented reason,
the rejection counter must count it under that reason, the worker must not crash, and the good
records around it must all be applied (the running sum is observed exactly: epsilon = 1e6 makes
theta <= 5e-6, see test_crash_recovery.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.domain.models import RAW_TRUNCATE_BYTES
from stream_app.metrics_page import sample
from tests.reliability import harness as h

pytestmark = [pytest.mark.integration]

# a report before its user's join is refused at once (holding: tests/stream_app/domain/test_hold.py)
SETTINGS = {**h.EXACT_SUM_SETTINGS, "PUFFERFISH_MAX_PAYLOAD_BYTES": "4096",
            "PUFFERFISH_JOIN_GRACE_SECONDS": "0",
            "PUFFERFISH_DEADLETTER_INCLUDE_RAW": "true"}  # dead letters matched by their raw
PRESENT = ["cp-1", "cp-2", "cp-3", "cp-4", "cp-5"]


def _setup_population(broker: EmbeddedBroker, topics: h.Topics, worker: h.Worker) -> int:
    """cp-1..cp-5 join, report once; cp-1 also sends report id dup-1; cp-5 leaves. Returns
    the number of reports accepted."""
    h.join(broker.bootstrap, topics, worker, PRESENT, ts=10.0)
    setup = [(topics.reports, u.encode(), h.report(u, i + 0, f"setup-{u}", ts=20.0 + i))
             for i, u in enumerate(PRESENT)]
    setup.append((topics.reports, b"cp-1", h.report("cp-1", 2, "dup-1", ts=30.0)))
    h.produce_raw(broker.bootstrap, setup)
    h.wait_consumed(worker, "report", len(setup))
    leave = h.membership("cp-5", "leave", 40.0)
    h.produce_raw(broker.bootstrap, [(topics.membership, b"cp-5", leave)])
    h.wait_consumed(worker, "membership", len(PRESENT) + 1)
    return len(setup)


def _dl_text(raw: bytes) -> str:
    return raw[:RAW_TRUNCATE_BYTES].decode("utf-8", errors="backslashreplace")


@pytest.mark.timeout(150)
def test_fixed_corpus_interleaved_with_good_records(broker_module: EmbeddedBroker,
                                                    tmp_path: Path) -> None:
    broker = broker_module
    topics = h.new_topics(broker.bootstrap, 2)
    bad = h.load_bad_records()
    assert len(bad) >= 45
    worker = h.Worker(h.worker_env(broker.url, topics, tmp_path / "data", SETTINGS), tmp_path,
                      "corpus").start()
    try:
        h.wait_ready(worker)
        setup_reports = _setup_population(broker, topics, worker)
        latest = {"cp-1": 2, "cp-2": 1, "cp-3": 2, "cp-4": 3}  # values after setup
        stream: list[tuple[str, bytes | None, bytes]] = []
        for i, rec in enumerate(bad):
            topic = topics.reports if rec.topic == "reports" else topics.membership
            stream.append((topic, rec.key.encode() if rec.key is not None else None, rec.value))
            user = f"cp-{i % 4 + 1}"
            value = (i * 7) % 6
            stream.append((topics.reports, user.encode(),
                           h.report(user, value, f"good-{i}", ts=100.0 + i)))
            latest[user] = value
        h.produce_raw(broker.bootstrap, stream)
        expected_sum = sum(latest.values())

        def all_dead_lettered(recs: list[dict[str, Any]]) -> bool:
            return len(recs) >= len(bad)

        deadletters = h.wait_for_records(broker.bootstrap, topics.deadletter, all_dead_lettered,
                                         60, f"{len(bad)} dead letters", worker)
        # Every good report applied before the sum is looked at: a state still catching up can
        # show the final sum (the values repeat every 12 good records; with every dead letter
        # written, cp-3's good-38/42/46 may still be due while good-34 already gives it the
        # final 4: 2 + 3 + 4 + 5 = 14). The counter counts applied reports only (none of the
        # bad records is one), so it reaches this total only once all of them are applied.
        h.wait_consumed(worker, "report", setup_reports + len(bad))
        releases = h.wait_for_records(
            broker.bootstrap, topics.releases,
            lambda r: bool(r) and abs(r[-1]["noisy_sum"] - expected_sum)
            <= h.laplace_bound(r[-1]["theta"]),
            60, f"running sum {expected_sum}", worker)
        samples = worker.samples()
        reason_metric = {
            reason: sample(samples, "pufferfish_events_rejected_total", {"reason": reason})
            for reason in {x for r in bad for x in r.accepted_reasons}
        }
        alive = worker.alive()
    finally:
        code = worker.stop()
    log = worker.output()

    # one dead letter per bad record, matched by its (truncated) raw bytes and source topic
    mismatches = []
    unmatched = list(deadletters)
    for rec in bad:
        src = topics.reports if rec.topic == "reports" else topics.membership
        hits = [d for d in unmatched
                if d["raw"] == _dl_text(rec.value) and d["source_topic"] == src]
        if not hits:
            mismatches.append(f"{rec.name}: no dead letter")
            continue
        unmatched.remove(hits[0])
        if hits[0]["reason"] not in rec.accepted_reasons:
            mismatches.append(f"{rec.name}: reason {hits[0]['reason']!r}, expected {rec.reason!r}")
    got_by_name = {}
    for rec in bad:
        src = topics.reports if rec.topic == "reports" else topics.membership
        got_by_name[rec.name] = next((d["reason"] for d in deadletters
                                      if d["raw"] == _dl_text(rec.value)
                                      and d["source_topic"] == src), None)
    expected_counts = Counter(got_by_name[r.name] if got_by_name[r.name] in r.accepted_reasons
                              else r.reason for r in bad)
    print(f"\nRELIABILITY corpus: sent_bad={len(bad)}, sent_good={len(bad)}, "
          f"deadlettered={len(deadletters)}, "
          f"reasons={dict(Counter(d['reason'] for d in deadletters))}, "
          f"releases={len(releases)}, final_sum_ok=True, lost=0")
    assert mismatches == [], "\n".join(mismatches)
    assert unmatched == [], f"unexpected extra dead letters: {unmatched}"
    got_counts = {k: int(v or 0) for k, v in reason_metric.items() if v}
    assert got_counts == dict(expected_counts), samples
    assert alive, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert code == 0 or code == -15 or code is None
    for d in deadletters:
        assert len(d["raw"]) <= 4 * RAW_TRUNCATE_BYTES
        assert set(d) >= {"source_topic", "raw", "reason", "ts"}


@pytest.mark.timeout(120)
def test_integer_with_thousands_of_digits_is_dead_lettered(broker_module: EmbeddedBroker,
                                                          tmp_path: Path) -> None:
    """max_payload_bytes may be up to 1 MiB; a 5000-digit integer then reaches json.loads,
    which raises a plain ValueError (Python's int digit limit) instead of JSONDecodeError."""
    broker = broker_module
    topics = h.new_topics(broker.bootstrap, 1)
    settings = {**SETTINGS, "PUFFERFISH_MAX_PAYLOAD_BYTES": "65536"}
    worker = h.Worker(h.worker_env(broker.url, topics, tmp_path / "data", settings), tmp_path,
                      "digits").start()
    poison = (b'{"user_id": "u1", "value": ' + b"7" * 5000
              + b', "report_id": "poison", "ts": 50.0}')
    try:
        h.wait_ready(worker)
        h.join(broker.bootstrap, topics, worker, ["u1"])
        h.produce_raw(broker.bootstrap, [
            (topics.reports, b"u1", poison),
            (topics.reports, b"u1", h.report("u1", 3, "after-poison", ts=60.0)),
        ])
        why = ""
        try:
            h.wait_until(lambda: any(
                abs(r["noisy_sum"] - 3) <= h.laplace_bound(r["theta"])
                for r in h.read_json(broker.bootstrap, topics.releases, timeout=1.0)), 60,
                "a release of the sum 3 (the good record after the poison one)", 0.5, worker)
            good_applied = True
        except AssertionError as exc:  # summarised below, then asserted
            good_applied, why = False, str(exc)
        alive = worker.alive()
    finally:
        worker.stop()
    deadletters = h.read_all_json(broker.bootstrap, topics.deadletter)
    crashed = "Traceback" in worker.output()
    print(f"\nRELIABILITY 5000-digit value: dead_letters={[d['reason'] for d in deadletters]}, "
          f"agent_crash_logged={crashed}, good_record_after_applied={good_applied}, alive={alive}")
    assert alive
    assert good_applied, f"the good record after the poison record was never applied: {why}"
    assert [d["reason"] for d in deadletters] in (["malformed_json"], ["invalid_schema"],
                                                   ["out_of_domain"])
    assert "Traceback" not in worker.output(), worker.output()[-3000:]
