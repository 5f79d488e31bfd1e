"""The worker's Faust app: no Faust web view serves stored state (docs/privacy.md, "Threat
model", operator-facing)."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.faust_adapter.app import new_app
from stream_app.settings import Settings
from tests.stream_app import worker_proc as wp
from tests.waiting import wait_for

# Faust's views that hand out table contents, the cluster's workers or the worker's internals
CLOSED_PATHS = ("/table/", "/table/users/", '/table/users/"web-user"/', "/table/partials/",
                "/router/", '/router/users/get/"web-user"/', "/graph/", "/assignment/",
                "/performance/")


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_environment_cannot_turn_table_or_router_views_back_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Faust's own variables win over App keyword arguments: the app switches them off itself
    for name in ("TABLES", "ROUTER", "STATS", "GRAPH", "METRICS"):
        monkeypatch.setenv(f"APP_WEB_{name}_ENABLED", "true")
    app = new_app(Settings(), "web-test", broker="kafka://127.0.0.1:1", store="memory://",
                  web_enabled=True)  # built, never started: no port is bound
    conf = app.conf
    assert not (conf.web_tables_enabled or conf.web_router_enabled or conf.web_stats_enabled
                or conf.web_graph_enabled or conf.web_metrics_enabled)


@pytest.mark.integration
@pytest.mark.slow
def test_worker_web_server_serves_no_table_or_router(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    env = wp.input_env(broker, tmp_path, 1, app_id="web", web_port="0")  # the OS picks
    worker = wp.start_worker(env, tmp_path, "w")
    try:
        now = time.time()
        n = wp.send(broker.bootstrap, "membership",
                    [("web-user", {"user_id": "web-user", "event": "join", "ts": now})])
        n += wp.send(broker.bootstrap, "reports", [("web-user", {
            "user_id": "web-user", "value": 1.0, "report_id": "r1", "ts": now})])
        wp.wait_handled([worker], n)  # the users table holds web-user's state now
        base = f"http://127.0.0.1:{worker.port('web')}"
        status, body = wait_for(lambda: _answer(base + "/"), 60, "the Faust web server",
                                retry_on=(OSError,), detail=worker.log)
        assert status == 200 and json.loads(body) == {"status": "OK"}
        for path in CLOSED_PATHS:
            status, body = get(base + path)
            assert status == 404, (path, status, body[:200])
            assert b"web-user" not in body and b"users" not in body, (path, body[:200])
    finally:
        rc = worker.stop(signal.SIGTERM)
    assert rc == 0, worker.log()


def _answer(url: str) -> tuple[int, bytes] | None:
    status, body = get(url)
    return (status, body) if status else None
