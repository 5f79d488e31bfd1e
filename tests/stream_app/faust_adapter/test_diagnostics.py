"""SIGUSR1 makes a live worker log what it waits on, without a single reported value."""

from __future__ import annotations

from pathlib import Path

from stream_app.demo.broker import EmbeddedBroker
from tests.processes import MARK
from tests.stream_app.worker_proc import (
    Reference,
    barrier,
    input_env,
    send,
    start_worker,
)

SECRET_USER = "diag-user-7f3a"
SECRET_VALUE = 3.0  # on the default grid; its text must not appear either as 3.0 nor "value"


def test_sigusr1_dumps_consumer_state_and_tasks(broker: EmbeddedBroker, tmp_path: Path) -> None:
    env = input_env(broker, tmp_path, 2, app_id="diag", domain=[0, 1, 2, 3],
                    pairs=["value_change"], budget_total="100")
    worker = start_worker(env, tmp_path, "w1")
    try:
        ref = Reference((0, 1, 2, 3), ("value_change",), 1.0)
        send(broker.bootstrap, "membership", [(SECRET_USER, ref.join(SECRET_USER))])
        send(broker.bootstrap, "reports",
             [(SECRET_USER, ref.report(SECRET_USER, SECRET_VALUE, "rid-secret-1"))])
        barrier(broker.bootstrap, 2, "diag")
        dump = worker.diagnose()
    finally:
        worker.stop()
    assert dump.startswith(MARK), dump[:500]
    for tp in ("reports[0]", "reports[1]", "membership[0]", "membership[1]"):
        line = next(x for x in dump.splitlines() if x.strip().startswith(tp))
        assert "position=" in line and "committed=" in line and "highwater=" in line, line
        assert "position=?" not in line, line
    assert "tasks" in dump
    # the input agent's await chain reaches into the project's own code, not only the task's
    # first frame
    assert "stream_app/faust_adapter/input_agent.py" in dump and "in process" in dump, dump[:3000]
    assert "in _watch_for_lost_records" in dump, dump[:3000]  # the consumer's stall watch runs
    for secret in (SECRET_USER, "rid-secret-1"):
        assert secret not in dump
