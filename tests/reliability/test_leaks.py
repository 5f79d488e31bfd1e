"""Nothing the worker emits may carry a raw value, a per-user value or the exact population size.

One module-scoped run: two workers (A and B) on identical inputs and separate topic sets, DEBUG
logging, metrics and the Faust web server enabled. Sentinels: the declared domain contains 7777
and every user reports 7777; exactly POPULATION users are present at the end (more joined, some
left); a rejected report carries 7776. Scanned: stdout+stderr, /metrics, the releases topic, and
the dead letters: all of A's (the default keeps no value), every field but `raw` of B's (B runs
with deadletter_include_raw=true, the one place raw input may appear: the positive control that
the scanner finds the sentinels at all).

The same run checks that the noise differs between the two runs (same inputs) and that every
listening socket of both worker processes is on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.metrics_page import parse, sample
from tests.reliability import procnet
from tests.reliability.harness import (
    Topics,
    Worker,
    membership,
    new_topics,
    produce_raw,
    read_json,
    report,
    wait_consumed,
    wait_for_records,
    wait_ready,
    worker_env,
)
from tests.reliability.sentinels import find

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("test_leaks")]

VALUE = 7777
REJECTED_VALUE = 7776
POPULATION = 1373          # present at the end
LEAVERS = 9                # joined, reported, left
EPSILON = 0.5              # theta = 7777 / 0.5 = 15554: not itself a sentinel spelling
SUM = POPULATION * VALUE
GRID_UNITS = 2 ** 10       # the worker keeps values as exact multiples of 2**-10
# also in grid units: a value or sum printed as an internal integer is still that value
SENTINELS = (VALUE, REJECTED_VALUE, SUM, POPULATION, VALUE * GRID_UNITS, SUM * GRID_UNITS)


@dataclass
class RunOutput:
    log: str
    metrics: str
    releases: list[dict[str, Any]]
    deadletters: list[dict[str, Any]]
    sockets: list[tuple[str, int]]
    ports: tuple[int, int]


def _worker_settings() -> dict[str, str]:
    return {
        "PUFFERFISH_DOMAIN": f"[0, 1, {REJECTED_VALUE - 1}, {VALUE}]",
        "PUFFERFISH_PAIRS": '["value_presence"]',
        "PUFFERFISH_EPSILON": str(EPSILON),
        "PUFFERFISH_BUDGET_TOTAL": "1000",
        "PUFFERFISH_RELEASE_PERIOD_SECONDS": "1.0",
        "PUFFERFISH_LOG_LEVEL": "debug",
        "PUFFERFISH_JOIN_GRACE_SECONDS": "0",  # a report before a join: dead-lettered at once
    }


def _inputs(topics: Topics) -> tuple[list[Any], list[Any], list[Any]]:
    users = [f"p{i:05d}" for i in range(POPULATION + LEAVERS)]
    joins = [(topics.membership, u.encode(), membership(u, "join", 1.0)) for u in users]
    reports = [(topics.reports, u.encode(), report(u, VALUE, f"{u}-r", 2.0)) for u in users]
    reports += [
        (topics.reports, b"p00000", report("p00000", REJECTED_VALUE, "bad-domain", 3.0)),
        (topics.reports, b"p00001", report("p00002", VALUE, "bad-key", 3.0)),
        (topics.reports, b"ghost", report("ghost", VALUE, "ghost-r", 3.0)),
    ]
    leaves = [(topics.membership, u.encode(), membership(u, "leave", 4.0))
              for u in users[POPULATION:]]
    return joins, reports, leaves


@pytest.fixture(scope="module")
def runs(broker_module: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[dict[str, RunOutput]]:
    broker = broker_module
    tmp = tmp_path_factory.mktemp("leaks")
    out: dict[str, RunOutput] = {}
    workers, topic_sets = {}, {}
    for name in ("A", "B"):
        topics = new_topics(broker.bootstrap, 2)
        keep_raw = {"PUFFERFISH_DEADLETTER_INCLUDE_RAW": "true"} if name == "B" else {}
        env = worker_env(broker.url, topics, tmp / f"data-{name}", {**_worker_settings(),
                                                                      **keep_raw})
        assert env["PUFFERFISH_WEB_PORT"] == "0"  # Faust's web server on: its socket is checked too
        workers[name] = Worker(env, tmp, f"leak-{name}").start()
        topic_sets[name] = topics
    try:
        for w in workers.values():
            wait_ready(w)
        for step, (kind, count) in enumerate([("membership", POPULATION + LEAVERS),
                                              ("report", POPULATION + LEAVERS),
                                              ("membership", POPULATION + 2 * LEAVERS)]):
            for name in workers:
                produce_raw(broker.bootstrap, _inputs(topic_sets[name])[step])
            for w in workers.values():
                wait_consumed(w, kind, count, timeout=90)
        for name, w in workers.items():
            topics = topic_sets[name]
            deadletters = wait_for_records(broker.bootstrap, topics.deadletter,
                                           lambda r: len(r) >= 3, 60, "3 dead letters", w)
            n_before = len(read_json(broker.bootstrap, topics.releases, timeout=1.0))
            releases = wait_for_records(broker.bootstrap, topics.releases,
                                        lambda r, n=n_before: len(r) >= n + 2, 60,
                                        "two releases after the last event", w)
            metrics = w.metrics_text() or ""
            sockets = procnet.listening(procnet.descendants(w.pid))
            out[name] = RunOutput("", metrics, releases, deadletters, sockets,
                                  (w.metrics_port, w.web_port))
    finally:
        for w in workers.values():
            w.stop()
    for name, w in workers.items():
        if name in out:
            out[name].log = w.output()
    yield out


def _assert_clean(where: str, text: str) -> None:
    hits = find(text, SENTINELS)
    assert not hits, f"{len(hits)} sentinel(s) in {where}, e.g.:\n" + "\n".join(hits[:8])


def test_scanner_positive_control(runs: dict[str, RunOutput]) -> None:
    """The raw field of B's rejected records (kept: deadletter_include_raw) must contain the
    sentinels: the scanner works."""
    raws = " ".join(d["raw"] for d in runs["B"].deadletters)
    assert find(raws, [REJECTED_VALUE]) and find(raws, [VALUE])


def test_logs_at_debug_level_carry_no_sentinel(runs: dict[str, RunOutput]) -> None:
    for name, run in runs.items():
        assert "DEBUG" in run.log, "the worker did not log at DEBUG level"
        _assert_clean(f"worker {name} stdout/stderr", run.log)


def test_log_lines_above_debug_carry_no_sentinel(runs: dict[str, RunOutput]) -> None:
    """Severity split of the test above: INFO/WARNING/ERROR lines (the default level is
    warning) must be clean even if DEBUG lines are not."""
    for name, run in runs.items():
        lines = [ln for ln in run.log.splitlines() if "DEBUG" not in ln]
        assert any("INFO" in ln for ln in lines)
        _assert_clean(f"worker {name} non-DEBUG log lines", "\n".join(lines))


def test_metrics_carry_no_sentinel(runs: dict[str, RunOutput]) -> None:
    for name, run in runs.items():
        assert "pufferfish_releases_total" in run.metrics
        _assert_clean(f"worker {name} /metrics", run.metrics)


def test_release_records_carry_no_sentinel(runs: dict[str, RunOutput]) -> None:
    for name, run in runs.items():
        assert run.releases
        fields = [{k: v for k, v in r.items() if k != "noisy_sum"} for r in run.releases]
        _assert_clean(f"worker {name} releases", json.dumps(fields))
        # a noisy sum equals a sentinel by chance with probability ~1e-7 a release (theta 15554
        # on a 2**-10 grid; ~40 releases in all: ~5e-6 a run); twice, ~1e-11. Releases without
        # noise would put at least the last two on the exact sum, a sentinel
        hits = [r["noisy_sum"] for r in run.releases if find(json.dumps(r["noisy_sum"]), SENTINELS)]
        assert len(hits) <= 1, f"worker {name}: noisy sums equal to a sentinel: {hits}"


def test_dead_letters_carry_no_sentinel_but_in_a_kept_raw(runs: dict[str, RunOutput]) -> None:
    assert all(d["raw"] is None for d in runs["A"].deadletters)  # the default
    for name, run in runs.items():
        assert {d["reason"] for d in run.deadletters} == {"out_of_domain", "key_mismatch",
                                                          "not_present"}
        stripped = [{k: v for k, v in d.items() if k != "raw" or name == "A"}
                    for d in run.deadletters]
        _assert_clean(f"worker {name} dead letters", json.dumps(stripped))


def test_same_inputs_give_different_noise(runs: dict[str, RunOutput]) -> None:
    a, b = runs["A"].releases, runs["B"].releases
    assert a[-1]["theta"] == b[-1]["theta"]
    # theta = 15554 on a 2**-10 grid: two independent draws of one sum coincide with prob.
    # ~1.6e-8; the runs have ~400 such pairs (~6e-6 a run), so one repeat is let pass (two:
    # ~2e-11). Reused or seeded noise repeats on nearly every pair of equal sums.
    assert a[-1]["noisy_sum"] != b[-1]["noisy_sum"]
    noisy_a = {r["noisy_sum"] for r in a}
    assert len(a) - len(noisy_a) <= 1, "repeated noisy values within one run"
    assert len(noisy_a & {r["noisy_sum"] for r in b}) <= 1


def test_every_listening_socket_is_loopback(runs: dict[str, RunOutput]) -> None:
    for name, run in runs.items():
        ports = {p for _, p in run.sockets}
        assert set(run.ports) <= ports, f"worker {name}: metrics/web not found in {run.sockets}"
        public = [(h, p) for h, p in run.sockets if h not in ("127.0.0.1", "::1")]
        assert not public, f"worker {name} listens beyond loopback: {public}"


def test_theta_comes_from_the_configuration_not_from_the_reports(
    runs: dict[str, RunOutput],
) -> None:
    """Public calibration (docs/privacy.md): before any learning round the group's law is
    uniform on the domain, so value_presence gives theta = max |domain| / epsilon -- the
    sentinel is the domain's largest value because the settings say so, whatever was reported
    (the stream with one user's value changed is tests/stream_app/test_neighbouring_runs.py)."""
    for run in runs.values():
        for rec in run.releases:
            assert rec["priors_seq"] == 0
            assert round(rec["theta"] * rec["epsilon"], 6) == VALUE


def test_metrics_do_not_give_the_exact_population(runs: dict[str, RunOutput]) -> None:
    """Joins and leaves share one counter label, so their difference is not exported."""
    m = parse(runs["A"].metrics)
    for kind in ("join", "leave"):
        assert sample(m, "pufferfish_events_applied_total", {"kind": kind}) is None
    membership = sample(m, "pufferfish_events_applied_total", {"kind": "membership"})
    assert membership == POPULATION + 2 * LEAVERS  # joins + leaves, not joins - leaves
    assert membership != POPULATION


def test_summary(runs: dict[str, RunOutput]) -> None:
    for name, run in runs.items():
        print(f"\nRELIABILITY leaks-{name}: log_bytes={len(run.log)}, "
              f"releases={len(run.releases)}, deadletters={len(run.deadletters)}, "
              f"sockets={run.sockets}, last_noisy_sum={run.releases[-1]['noisy_sum']}, "
              f"true_sum={SUM}")
