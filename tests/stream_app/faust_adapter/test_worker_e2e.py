"""End to end on a real tansu broker: one worker subprocess, joins/leaves/reports -> releases."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from pufferfish_core.auditor import audit
from stream_app.demo.broker import EmbeddedBroker
from tests.stream_app import worker_proc as wp

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

DOMAIN = (0.0, 1.0, 2.0, 3.0, 4.0)
PAIRS = ("distribution_presence", "value_change")
EPS = 1.0
BUDGET = 10_000.0
GROUPS = ("g0", "g1", "g2")
RELEASE_FIELDS = {
    "seq", "ts", "noisy_sum", "theta", "epsilon", "epsilon_spent", "epsilon_remaining", "pairs",
    "rule", "binding_pair", "binding_group", "priors_seq", "charge", "window", "tick",
    "learning_rounds", "failure_probability",
    # the release mechanism (independent here: the tree's fields are null)
    "mechanism", "window_tick", "nodes", "arity", "max_changes_per_window",
    # the error bar (issue 45); no "groups": release_by_group is off, the key is absent
    "noise_sd", "ci95_half_width",
}


@pytest.mark.slow
def test_end_to_end(broker: EmbeddedBroker, tmp_path: Path) -> None:
    env = wp.input_env(
        broker, tmp_path, 2, app_id="e2e", domain=list(DOMAIN),
        pairs=list(PAIRS), epsilon=str(EPS), budget_total=str(BUDGET),
        release_period_seconds="0.5", groups=list(GROUPS), learn_period_seconds="86400",
    )
    worker = wp.start_worker(env, tmp_path, "w1")
    try:
        ref = wp.Reference(DOMAIN, PAIRS, EPS, groups=GROUPS)
        rng = random.Random(11)
        users = [f"user-{i}" for i in range(12)]
        n = wp.send(broker.bootstrap, "membership",
                 [(u, ref.join(u, group=f"g{i % 3}")) for i, u in enumerate(users)])
        wp.wait_handled([worker], n, timeout=60)

        reports = []
        for k in range(120):
            u = rng.choice(users)
            reports.append((u, ref.report(u, rng.choice(DOMAIN), f"r{k}")))
        dups = [reports[3], reports[50], reports[50], reports[119]]  # same report_id re-sent
        n += wp.send(broker.bootstrap, "reports", reports + dups)
        wp.wait_handled([worker], n)
        n += wp.send(broker.bootstrap, "membership", [(u, ref.leave(u)) for u in users[:3]])
        wp.wait_handled([worker], n)
        # a late report for a present user changes X once the leaves are in
        n += wp.send(broker.bootstrap, "reports", [(users[5], ref.report(users[5], 4.0, "late"))])
        wp.wait_handled([worker], n)
        drained = time.time()

        metrics = worker.samples()
        assert metrics[("pufferfish_events_rejected_total", (("reason", "duplicate_report"),))] == 4
        assert metrics[("pufferfish_events_applied_total", (("kind", "report"),))] == 121
        assert metrics[("pufferfish_events_applied_total", (("kind", "membership"),))] == 12 + 3
        assert ("pufferfish_events_applied_total", (("kind", "join"),)) not in metrics
        assert not any("present" in name for name, _ in metrics)

        # partials flush every <= 0.25 s; take releases that started >= 1 s after the drain
        records = wp.releases_after(broker.bootstrap, drained + 1.0, 4, timeout=60)
        fresh = [r for r in records if r["ts"] > drained + 1.0]
        x, theta = ref.x(), ref.theta()
        assert theta > 0
        bound = wp.noise_bound(theta, len(fresh))
        for r in fresh:
            assert set(r) == RELEASE_FIELDS
            assert r["theta"] == pytest.approx(theta, rel=1e-12)
            assert abs(r["noisy_sum"] - x) <= bound, (r, x, bound)
            assert r["pairs"] == list(PAIRS) and r["rule"] == "kantorovich" and r["epsilon"] == EPS
            assert r["priors_seq"] == 0 and r["charge"] >= EPS
            assert r["mechanism"] == "independent" and r["nodes"] is None
            # noise is on the 2**-10 grid
            assert (r["noisy_sum"] * 1024).is_integer()
        # every public pair passes the exact audit at the release's theta, and it is tight
        losses = [audit(a, b, fresh[-1]["theta"]).loss for a, b in ref.group_pairs()]
        assert max(losses) <= EPS * (1 + 1e-9)
        assert max(audit(a, b, fresh[-1]["theta"] * 0.999).loss
                   for a, b in ref.group_pairs()) > EPS
        # seqs 1..n without gaps; budget bookkeeping monotone and consistent
        seqs = [r["seq"] for r in records]
        assert seqs == list(range(1, len(records) + 1))
        # one release per tick of the public clock, consecutive (no learning round was due)
        ticks = [r["tick"] for r in records]
        assert ticks == list(range(ticks[0], ticks[0] + len(records)))
        assert all(r["learning_rounds"] == 0 == r["failure_probability"] for r in records)
        spent = [r["epsilon_spent"] for r in records]
        assert all(b > a for a, b in zip(spent, spent[1:], strict=False))
        for r in records:
            assert r["epsilon_spent"] + r["epsilon_remaining"] == pytest.approx(BUDGET)
        final = worker.samples()
        assert final[("pufferfish_releases_total", ())] >= len(records)
        assert final[("pufferfish_theta", ())] == pytest.approx(theta)
        assert worker.alive()
    finally:
        rc = worker.stop()
    assert rc == 0, worker.log()
