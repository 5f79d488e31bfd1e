"""The real Prometheus server, with the project's scrape config and rules, scrapes a real worker.

Prometheus (Debian package) and a worker (`python -m stream_app run`) run on 127.0.0.1 on ports
the OS picks (each says which: tests/ports.py) against the embedded broker. The budget is sized
to run out after a few releases, so the gauges stop moving and Prometheus' latest sample can be
compared exactly with /metrics.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import stream_app
from stream_app.demo.broker import EmbeddedBroker
from stream_app.metrics_page import Samples, local_url, scrape
from stream_app.settings.load import without_settings
from tests.deploy.support import (
    DASHBOARD,
    ROOT,
    RULES_FILE,
    dashboard_exprs,
    load_yaml,
    rule_exprs,
    running_prometheus,
    stop_process_group,
)
from tests.kafka_helpers import produce_json
from tests.ports import worker_port
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

EPSILON = 1.0
# value_presence charges exactly epsilon per release (docs/design.md, Composition): three
# releases fit in 3.5, the fourth is refused, and 0.5 stays.
BUDGET_TOTAL = 3.5
RELEASES_BEFORE_EXHAUSTION = 3
USERS = [f"u{i}" for i in range(6)]
REPORT_VALUES = [1, 2, 3]          # every user reports each value once


# --- small HTTP helpers ---------------------------------------------------------------------

def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback only
        return bytes(response.read())


def worker_samples(port: int) -> Samples:
    """(sample name, sorted labels) -> value, from the worker's own /metrics ({} while down)."""
    return scrape(local_url(port))


def prom_query(prom_port: int, expr: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        body = _get(url)
    except urllib.error.HTTPError as exc:  # 400 bad_data carries the parse error
        body = exc.read()
    return dict(json.loads(body))


# --- processes ------------------------------------------------------------------------------

@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    metrics_port: int
    log: Path


@pytest.fixture
def worker(broker: EmbeddedBroker, tmp_path: Path) -> Iterator[Worker]:
    ports_file = tmp_path / "worker.ports.json"
    env = without_settings()
    env.update({
        "PUFFERFISH_BROKER": broker.url,
        "PUFFERFISH_APP_ID": "deploy-prom-test",
        "PUFFERFISH_DATA_DIR": str(tmp_path / "data"),
        "PUFFERFISH_METRICS_HOST": "127.0.0.1",
        "PUFFERFISH_METRICS_PORT": "0",  # the OS picks; the worker writes it to ports_file
        "PUFFERFISH_PORTS_FILE": str(ports_file),
        "PUFFERFISH_DOMAIN": "[0, 1, 2, 3]",
        "PUFFERFISH_PAIRS": '["value_presence"]',
        "PUFFERFISH_EPSILON": str(EPSILON),
        "PUFFERFISH_BUDGET_TOTAL": str(BUDGET_TOTAL),
        "PUFFERFISH_RELEASE_PERIOD_SECONDS": "1",
        "PUFFERFISH_PRIOR_SOURCE": "learned",
        "PUFFERFISH_LEARN_PERIOD_SECONDS": "86400",  # no learning round: exact budget arithmetic
        # tansu workarounds (shared/kafka.md)
        "PUFFERFISH_PRODUCER_MAX_BATCH_SIZE": "1",
        "PUFFERFISH_PRODUCER_LINGER_SECONDS": "0",
        "PUFFERFISH_BROKER_SESSION_TIMEOUT": "6",
        "PUFFERFISH_BROKER_REBALANCE_TIMEOUT": "6",
        "PUFFERFISH_BROKER_HEARTBEAT_INTERVAL": "1",
        "PUFFERFISH_LOG_LEVEL": "info",
    })
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stream_app", "run"], cwd=ROOT, env=env,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield Worker(proc, worker_port(ports_file, "metrics", proc, log.read_text), log)
    finally:
        stop_process_group(proc)


@pytest.fixture
def prometheus(worker: Worker, tmp_path: Path) -> Iterator[int]:
    with running_prometheus(tmp_path, [f"127.0.0.1:{worker.metrics_port}"]) as port:
        yield port


def _wait_for(what: str, check: Any, timeout: float, worker: Worker) -> Any:
    def guard() -> None:
        if worker.proc.poll() is not None:
            tail = worker.log.read_text()[-3000:]
            pytest.fail(f"worker exited ({worker.proc.returncode}) while waiting for {what}:\n"
                        f"{tail}")

    return wait_for(check, timeout, what, 0.3, guard=guard, retry_on=(OSError,),
                    detail=lambda: worker.log.read_text()[-3000:])


def _consumed(worker: Worker, kind: str) -> float | None:
    return worker_samples(worker.metrics_port).get(
        ("pufferfish_events_applied_total", (("kind", kind),)))


def _produce_population(bootstrap: str, worker: Worker) -> int:
    """Joins first and, once the worker has applied them, the reports (a report of a user who
    has not joined is dead-lettered as not_present)."""
    joins = [(u, {"user_id": u, "event": "join", "ts": time.time()}) for u in USERS]
    asyncio.run(produce_json(bootstrap, "membership", joins))
    _wait_for("the joins", lambda: _consumed(worker, "membership") == len(USERS), 60, worker)
    reports = [
        (u, {"user_id": u, "value": v, "report_id": f"{u}-{v}", "ts": time.time()})
        for u in USERS for v in REPORT_VALUES
    ]
    return asyncio.run(produce_json(bootstrap, "reports", reports))


KEY_SERIES = {
    "pufferfish_theta": ("pufferfish_theta", ()),
    "pufferfish_epsilon_remaining": ("pufferfish_epsilon_remaining", ()),
    'pufferfish_events_applied_total{kind="report"}':
        ("pufferfish_events_applied_total", (("kind", "report"),)),
    'pufferfish_events_applied_total{kind="membership"}':
        ("pufferfish_events_applied_total", (("kind", "membership"),)),
}


def _prom_value(prom_port: int, expr: str, job_filter: str) -> tuple[float, float] | None:
    """(scrape timestamp, value) of the latest sample of the single series `expr` selects for
    the worker job. A range selector returns the raw samples with the time of their scrape; an
    instant query's timestamp would be the query's evaluation time, so a scrape taken before
    the gauges froze would pass for one taken after."""
    selector = (expr.replace("}", f",{job_filter}}}") if "}" in expr
                else f"{expr}{{{job_filter}}}")
    answer = prom_query(prom_port, f"{selector}[1m]")
    assert answer["status"] == "success", answer
    result = answer["data"]["result"]
    if not result:
        return None
    assert len(result) == 1, result
    ts, value = result[0]["values"][-1]
    return float(ts), float(value)


@pytest.mark.slow
def test_prometheus_sees_what_the_worker_exports(
    broker: EmbeddedBroker, worker: Worker, prometheus: int
) -> None:
    # The worker creates its topics at start; produce once its metrics endpoint is up.
    _wait_for("the worker's /metrics", lambda: worker_samples(worker.metrics_port), 60, worker)
    reports = _produce_population(broker.bootstrap, worker)

    def frozen() -> dict[str, float] | None:
        samples = worker_samples(worker.metrics_port)
        done = (
            samples.get(("pufferfish_events_applied_total", (("kind", "report"),))) == reports
            and samples.get(("pufferfish_budget_exhausted", ())) == 1
        )
        return {k: samples[v] for k, v in KEY_SERIES.items()} if done else None

    expected = _wait_for("all reports consumed and the budget exhausted", frozen, 120, worker)
    frozen_at = time.time()

    # Independent expectations: what was produced, and the budget arithmetic.
    assert expected['pufferfish_events_applied_total{kind="membership"}'] == len(USERS)
    assert expected['pufferfish_events_applied_total{kind="report"}'] == reports
    assert expected["pufferfish_epsilon_remaining"] == pytest.approx(
        BUDGET_TOTAL - RELEASES_BEFORE_EXHAUSTION * EPSILON, abs=1e-9)
    assert expected["pufferfish_theta"] > 0 and math.isfinite(expected["pufferfish_theta"])
    # value_presence on the group's public law (uniform on the domain [0, 3] before any learning
    # round): theta = max|a| / eps = 3 / eps (Thm 2; the exact rule is tight)
    assert expected["pufferfish_theta"] * EPSILON == pytest.approx(3.0, rel=1e-6)

    job = 'job="pufferfish"'

    def scraped_after_freeze() -> dict[str, float] | None:
        got = {}
        for expr in KEY_SERIES:
            sample = _prom_value(prometheus, expr, job)
            if sample is None or sample[0] <= frozen_at:
                return None
            got[expr] = sample[1]
        return got

    seen = _wait_for("a Prometheus scrape after the gauges froze", scraped_after_freeze, 60, worker)
    now = worker_samples(worker.metrics_port)
    assert {k: now[v] for k, v in KEY_SERIES.items()} == expected, "the worker moved meanwhile"
    assert seen == expected

    up = _prom_value(prometheus, "up", job)
    assert up is not None and up[1] == 1.0
    releases = _prom_value(prometheus, "pufferfish_releases_total", job)
    assert releases is not None and releases[1] == RELEASES_BEFORE_EXHAUSTION

    # The dashboard's headline numbers are the worker's numbers.
    panels = dict(dashboard_exprs(json.loads(DASHBOARD.read_text())))
    for title, series in (("Noise scale θ (current)", "pufferfish_theta"),
                          ("ε remaining", "pufferfish_epsilon_remaining")):
        answer = prom_query(prometheus, panels[title])
        assert answer["status"] == "success", answer
        (result,) = answer["data"]["result"]
        assert float(result["value"][1]) == expected[series], title

    # Every dashboard and alert expression is valid PromQL for this Prometheus, and the rules
    # file was loaded (the budget-exhausted alert is active now).
    exprs = [e for _, e in dashboard_exprs(json.loads(DASHBOARD.read_text()))]
    exprs += [e for _, e in rule_exprs(load_yaml(RULES_FILE))]
    for expr in exprs:
        answer = prom_query(prometheus, expr.replace("$__rate_interval", "1m"))
        assert answer["status"] == "success", (expr, answer)
    alerts = _wait_for(
        "the PufferfishBudgetExhausted alert",
        lambda: [a for a in json.loads(_get(f"http://127.0.0.1:{prometheus}/api/v1/alerts"))
                 ["data"]["alerts"] if a["labels"]["alertname"] == "PufferfishBudgetExhausted"],
        60, worker,
    )
    assert alerts[0]["state"] == "firing"

    # The page itself passes Prometheus' own linter, with the standard collectors, the build
    # info and no _created series
    page = _get(local_url(worker.metrics_port)).decode()
    lint = subprocess.run([shutil.which("promtool") or "promtool", "check", "metrics"],
                          input=page, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0 and lint.stdout == lint.stderr == "", lint.stdout + lint.stderr
    assert "_created" not in page
    names = {line.split("{")[0].split(" ")[0] for line in page.splitlines()
             if line and not line.startswith("#")}
    assert {"process_resident_memory_bytes", "python_info", "python_gc_collections_total"} \
        <= names
    assert f'pufferfish_build_info{{version="{stream_app.__version__}"}} 1.0' in page
