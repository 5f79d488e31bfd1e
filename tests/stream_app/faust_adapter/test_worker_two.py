"""Two workers share the input partitions: the releases match what one worker publishes."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from stream_app.demo.broker import EmbeddedBroker
from tests.stream_app import worker_proc as wp
from tests.stream_app.faust_adapter.test_worker_restart import (
    all_releases,
    check_consistent,
    check_journal,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

DOMAIN = (0.0, 0.5, 1.0, 1.5, 2.0)
PAIRS = ("distribution_presence", "value_presence")
PARTS = 2


@pytest.mark.slow
def test_two_workers(broker: EmbeddedBroker, tmp_path: Path) -> None:
    env = wp.input_env(
        broker, tmp_path, PARTS, app_id="pair", domain=list(DOMAIN),
        pairs=list(PAIRS), budget_total="10000", release_period_seconds="0.5",
    )
    workers = [wp.start_worker(env, tmp_path, "w1"), wp.start_worker(env, tmp_path, "w2")]
    try:
        # wait until both workers own input partitions (each has handled a barrier record)
        deadline = time.monotonic() + 90
        k = 0
        while not all(wp.handled([w]) > 0 for w in workers):
            assert time.monotonic() < deadline, "the two workers never shared the partitions"
            assert all(w.alive() for w in workers), [w.log() for w in workers]
            wp.barrier(broker.bootstrap, PARTS, f"warm{k}")
            k += 1

        ref = wp.Reference(DOMAIN, PAIRS, 1.0)
        rng = random.Random(2)
        users = [f"p{i}" for i in range(16)]
        wp.send(broker.bootstrap, "membership", [(u, ref.join(u)) for u in users])
        wp.barrier(broker.bootstrap, PARTS, "joined")
        batch = []
        for j in range(80):
            u = rng.choice(users)
            batch.append((u, ref.report(u, rng.choice(DOMAIN), f"r{j}")))
        wp.send(broker.bootstrap, "reports", batch + batch[:6])
        wp.barrier(broker.bootstrap, PARTS, "reported")
        wp.send(broker.bootstrap, "membership", [(u, ref.leave(u)) for u in users[:4]])
        wp.barrier(broker.bootstrap, PARTS, "left")
        check_consistent(broker.bootstrap, ref, time.time() + 1.0)

        def published() -> float:
            key = ("pufferfish_releases_total", ())
            return sum(w.samples()[key] for w in workers)

        # releases keep coming while we read: bracket the journal read with two counter reads
        before = published()
        records = all_releases(broker.bootstrap, at_least=int(before))  # not a timed read
        after = published()
        check_journal(records)
        # exactly one releaser: every published record counted once, none published twice
        assert before <= len(records) <= after
        assert all(w.alive() for w in workers)
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.log() for w in workers]
