"""Privacy windows on the real broker (issue 13): the budget renews on the public clock.

Window 20 s, a release every second, a budget of exactly 5 releases per window (bound rule on a
value pair: the charge is epsilon = 1, budget_total = 5). Every window the run covers whole gets
exactly 5 releases; a SIGKILL and restart inside a window resumes with that window's spent
budget, so it never gets a 6th; `pufferfish plan` on the same settings says 5 per window.
"""

from __future__ import annotations

import math
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from stream_app.local.broker import EmbeddedBroker
from tests.kafka_helpers import consume_all, json_values
from tests.stream_app.worker_proc import input_env, plan_json, start_worker, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

WINDOW = 20.0
SETTINGS = {
    "app_id": "windows", "domain": [0, 1, 2], "pairs": ["value_presence"], "rule": "bound",
    "epsilon": "1", "budget_total": "5", "release_period_seconds": "1",
    "budget_window_seconds": str(WINDOW),
}


def _releases(bootstrap: str) -> list[dict]:
    import asyncio

    return json_values(asyncio.run(consume_all(bootstrap, "releases", timeout=1.0)))


def _plan(tmp_path: Path) -> dict:
    return plan_json({k: v for k, v in SETTINGS.items() if k != "app_id"}, tmp_path)


def _window_start_after(t: float) -> float:
    return (math.floor(t / WINDOW) + 1) * WINDOW


def test_five_releases_in_every_window_across_a_sigkill(broker: EmbeddedBroker,
                                                        tmp_path: Path) -> None:
    env = input_env(broker, tmp_path, partitions=1, **SETTINGS)
    worker = start_worker(env, tmp_path, "w1")
    try:
        wait_until(lambda: len(_releases(broker.bootstrap)) >= 1, 90, "a first release")
        first_full = _window_start_after(time.time())
        # kill in the middle of the second whole window, after some of its releases
        kill_at = first_full + WINDOW + 2.5
        wait_until(lambda: time.time() >= kill_at, 3 * WINDOW + 30, f"t >= {kill_at:.0f}")
        killed_window = math.floor(time.time() / WINDOW)
        worker.stop(signal.SIGKILL)
        worker = start_worker(env, tmp_path, "w2")
        end = first_full + 3 * WINDOW
        wait_until(lambda: time.time() >= end + 2, 4 * WINDOW + 60, "three whole windows")
    finally:
        worker.stop()
    records = _releases(broker.bootstrap)
    per_window = Counter(r["window"] for r in records)
    whole = [int(first_full / WINDOW) + k for k in range(3)]
    assert [per_window[w] for w in whole] == [5, 5, 5], (per_window, whole, killed_window)
    for r in records:
        assert r["window"] == math.floor(r["ts"] / WINDOW)
        assert r["charge"] == 1.0
    in_killed = sorted((r for r in records if r["window"] == killed_window),
                       key=lambda r: r["seq"])
    assert [r["epsilon_spent"] for r in in_killed] == [1.0, 2.0, 3.0, 4.0, 5.0]
    seqs = [r["seq"] for r in records]
    assert len(seqs) == len(set(seqs))
    window = _plan(tmp_path)["window"]
    assert window["releases_per_window"] == 5 and window["runs_out_before_window_end"]
