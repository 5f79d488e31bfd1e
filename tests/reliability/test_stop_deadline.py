"""SIGTERM stops a worker within shutdown_timeout_seconds even when its broker is gone
(stream_app/faust_adapter/stop_deadline.py). Faust's stop flushes the producer, commits and
leaves the group: against a stopped broker each waits on the client's timeouts and retries (a
worker left running after its broker stopped ignored SIGTERM for more than 15 s; with this test's
set-up and shutdown_timeout_seconds=60 the deadline still had to end it, 60.1 s after SIGTERM,
last step logged: "Flush producer buffer...")."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from stream_app.demo.broker import EmbeddedBroker
from tests.reliability.harness import (
    EXACT_SUM_SETTINGS,
    Worker,
    new_topics,
    produce_raw,
    report,
    wait_ready,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SHUTDOWN_TIMEOUT = 4.0
SIGNAL_SLACK = 2.0  # the signal's delivery and the process's exit, on a loaded machine
BROKER_GONE_FOR = 3.0  # the worker's clients notice the broker is gone meanwhile


@pytest.mark.slow
def test_sigterm_stops_the_worker_in_time_without_its_broker(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    topics = new_topics(broker.bootstrap, 2)
    limit = SHUTDOWN_TIMEOUT
    overrides = {**EXACT_SUM_SETTINGS, "PUFFERFISH_AUTO_JOIN": "true",
                 "PUFFERFISH_GROUPS": '["g"]', "PUFFERFISH_SHUTDOWN_TIMEOUT_SECONDS": str(limit)}
    worker = Worker(worker_env(broker.url, topics, tmp_path / "data", overrides), tmp_path,
                    "worker").start()
    try:
        wait_ready(worker)
        produce_raw(broker.bootstrap, [(topics.reports, f"u{i}".encode(),
                                        report(f"u{i}", 1, f"r{i}")) for i in range(20)])
        time.sleep(1.0)  # some of it consumed, written and committed
        broker.stop()
        time.sleep(BROKER_GONE_FOR)
        assert worker.alive(), worker.tail()
        assert worker.proc is not None
        began = time.monotonic()
        os.killpg(worker.proc.pid, signal.SIGTERM)
        try:
            code = worker.proc.wait(timeout=limit + SIGNAL_SLACK)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {limit + SIGNAL_SLACK:g} s after SIGTERM "
                        f"(shutdown timeout {limit:g} s):\n{worker.diagnose()}")
        took = time.monotonic() - began
        assert code == 0, f"exit {code} after {took:.1f} s:\n{worker.tail()}"
        print(f"\nSTOP without broker: exit {code} {took:.1f} s after SIGTERM "
              f"(shutdown timeout {limit:g} s)")
    finally:
        worker.stop()
