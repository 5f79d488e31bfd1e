"""The dashboard, drawn from a real Prometheus scraping a real worker: every query has data.

A worker (`python -m stream_app run`) on the embedded broker runs with short periods and a small
budget per short privacy window, so within a minute every panel has something to show: releases,
learning rounds, an exhausted budget renewed by the next window, and dead letters of three
reasons. Prometheus (Debian package, the project's scrape config) scrapes it every second and
`python -m deploy.grafana.render` draws the panels.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from deploy.grafana import queries as dq
from deploy.grafana import render as dr
from stream_app.demo.broker import EmbeddedBroker
from stream_app.metrics import METRIC_NAMES
from tests.deploy.support import (
    DASHBOARD,
    HISTOGRAM_SUFFIXES,
    dashboard_exprs,
    promql_metric_names,
    running_prometheus,
)
from tests.stream_app.worker_proc import Worker, send, start_worker, worker_env
from tests.waiting import wait_for

USERS = [f"u{i}" for i in range(6)]
WINDOW = 12.0       # seconds: the budget renews every 12 s
BUDGET = 4.5        # per window: four releases at epsilon 1 (+ learning rounds at 0.1) fit
# Rejected on purpose (so "Rejections by reason" has data): reason -> (key, raw record)
REJECTS = {
    "malformed_json": (b"u0", b"{not json"),
    "not_present": (b"ghost", b'{"user_id": "ghost", "value": 1, "report_id": "g1", "ts": 1}'),
    "out_of_domain": (b"u1", b'{"user_id": "u1", "value": 9, "report_id": "x9", "ts": 1}'),
}
# The range the test queries and renders: the time Prometheus has run (from a little before
# it scraped first) up to a given end
LEAD = 3.0  # seconds before `scraped_since`


def test_dashboard_shows_every_metric() -> None:
    exprs = [e for _, e in dashboard_exprs(json.loads(DASHBOARD.read_text(encoding="utf-8")))]
    used = set().union(*(promql_metric_names(e) for e in exprs))
    shown = {next((n[: -len(s)] for s in HISTOGRAM_SUFFIXES if n.endswith(s)), n) for n in used}
    assert set(METRIC_NAMES) <= shown, set(METRIC_NAMES) - shown


@pytest.mark.parametrize(("expr", "expected"), [
    ("rate(x[$__rate_interval])", "rate(x[4s])"),
    ('up{job="$job", instance=~"${instance}"}', 'up{job="pufferfish", instance=~".+"}'),
    ("sum(x[[[job]]])", "sum(x[pufferfish])"),
])
def test_grafana_variables_are_replaced(expr: str, expected: str) -> None:
    variables = {**dr.DEFAULT_VARS, **dq.time_vars(60, 1, 1)}
    assert dq.substitute(expr, variables) == expected


def test_durations() -> None:
    assert dq.parse_duration("1m30s") == 90 and dq.parse_duration("250ms") == 0.25
    with pytest.raises(dq.RenderError):
        dq.parse_duration("15 seconds")


@pytest.mark.parametrize("argv", [
    ["--out", "x"],                                                      # no --prometheus
    ["--prometheus", "http://127.0.0.1:1", "--out", "x"],                # nothing listens
    ["--prometheus", "http://127.0.0.1:1", "--out", "x", "--dashboard", "/nonexistent.json"],
    ["--prometheus", "http://127.0.0.1:1", "--out", "x", "--minutes", "0"],
])
def test_errors_are_one_line_exit_2(argv: list[str], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert dr.main([a.replace("x", str(tmp_path / "out")) if a == "x" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err


def test_unknown_variable_is_an_error(tmp_path: Path) -> None:
    target = {"refId": "A", "expr": 'x{a="$nope"}'}
    dash = {"panels": [{"id": 1, "title": "t", "targets": [target]}]}
    with pytest.raises(dq.RenderError, match=r"\$nope"):
        dq.load_panels(dash, dict(dr.DEFAULT_VARS))


# --- the live render ------------------------------------------------------------------------

@pytest.fixture
def worker(broker: EmbeddedBroker, tmp_path: Path) -> Iterator[Worker]:
    env = worker_env(
        broker, tmp_path, app_id="dashboard-render-test", domain=[0, 1, 2, 3],
        pairs=["value_presence"], epsilon=1.0, budget_total=BUDGET,
        budget_window_seconds=WINDOW, release_period_seconds=1.0, learn_period_seconds=3.0,
        epsilon_learn=0.1, join_grace_seconds=0,  # not_present at once
        release_by_group=True,  # the per-group band panels have series too
    )
    proc = start_worker(env, tmp_path, "worker")
    try:
        yield proc
    finally:
        proc.stop()


def _populate(bootstrap: str, worker: Worker) -> None:
    def guard() -> None:
        assert worker.alive(), f"worker exited:\n{worker.log()}"

    wait_for(lambda: worker.samples(), 60, "the worker's /metrics", guard=guard)
    now = time.time()
    send(bootstrap, "membership", [(u, {"user_id": u, "event": "join", "ts": now}) for u in USERS])
    wait_for(lambda: worker.samples().get(
        ("pufferfish_events_applied_total", (("kind", "membership"),))) == len(USERS),
        60, "the joins", guard=guard)
    send(bootstrap, "reports", [(u, {"user_id": u, "value": v, "report_id": f"{u}-{v}",
                                     "ts": time.time()}) for u in USERS for v in (1, 2, 3)])
    send(bootstrap, "reports", list(REJECTS.values()))


def _scraped(prom_port: int, worker: Worker) -> bool:
    assert worker.alive(), f"worker exited:\n{worker.log()}"
    answer = dq.Prometheus(f"http://127.0.0.1:{prom_port}").call(
        "/api/v1/query", query='count(pufferfish_events_rejected_total{job="pufferfish"})')
    return bool(answer.get("data", {}).get("result"))


def _args(prom_port: int, out: Path, start: float, end: float) -> list[str]:
    """The renderer's arguments for the range [start, end], its end given: the same arguments
    ask Prometheus the same queries at the same evaluation times (start + k * step)."""
    return ["--prometheus", f"http://127.0.0.1:{prom_port}", "--out", str(out),
            "--end", repr(end), "--minutes", repr((end - start) / 60)]


def _by_title(got: dr.Collected) -> dict[str, dict[str, dq.Target]]:
    return {p.title: {t.ref: t for t in p.targets} for p in got.panels}


def _missing(worker: Worker, args: list[str]) -> list[str]:
    """What the dashboard does not show yet over the range of `args` (empty: everything is
    there)."""
    assert worker.alive(), f"worker exited:\n{worker.log()}"
    got = dr.collect(dr.parser().parse_args(args))
    missing = [f"{p.title} {t.ref}" for p in got.panels for t in p.targets
               if dr.finite_max(t) is None]
    panels = _by_title(got)
    rejected = {s.label for s in panels["Rejections by reason"]["A"].series
                if max(filter(math.isfinite, s.values), default=0) > 0}
    missing += [f"rejections: {r}" for r in sorted(set(REJECTS) - rejected)]
    if (dr.finite_max(panels["Learning rounds"]["B"]) or 0) < 2:
        missing.append("two learning rounds")
    band = panels["Released sum ± 2 sd"]  # the band is around the sum: -2 sd < sum < +2 sd
    if not all(dr.finite_max(band[r]) is not None for r in "ABC") or not (
            dr.finite_max(band["C"]) < dr.finite_max(band["A"]) < dr.finite_max(band["B"])):
        missing.append("the released sum inside its band")
    if dr.finite_max(panels["Budget exhausted"]["A"]) != 1:
        missing.append("an exhausted budget")
    # the exhausted budget renewed: epsilon remaining went below 1 and later rose again.
    # Only a renewal raises it; by how much a 1 s scrape sees depends on how soon after the
    # renewal the next release spends (up to two releases + a round: 4.5 - 2.2 = 2.3 > 1 + 1).
    remaining = [v for s in panels["Privacy budget"]["B"].series for v in s.values
                 if math.isfinite(v)]
    low = next((i for i, v in enumerate(remaining) if v < 1), None)
    if low is None or max(remaining[low:]) < remaining[low] + 1:
        missing.append("a renewed budget")
    return missing


@pytest.mark.integration
@pytest.mark.slow
def test_every_panel_renders_real_series(
    broker: EmbeddedBroker, worker: Worker, tmp_path: Path
) -> None:
    with running_prometheus(tmp_path, [f"127.0.0.1:{worker.metrics_port}"], "1s") as port:
        scraped_since = time.time()
        # produced once Prometheus scrapes: a counter's rate shows only increases it saw
        wait_for(lambda: _scraped(port, worker), 60, "a first scrape of the worker",
                 detail=worker.log)
        _populate(broker.bootstrap, worker)
        missing: list[str] = []
        shown_until = [0.0]  # the end of the range where everything was shown

        def shown() -> bool:
            shown_until[0] = time.time()
            args = _args(port, tmp_path / "unused", scraped_since - LEAD, shown_until[0])
            missing[:] = _missing(worker, args)
            return not missing

        wait_for(shown, 120, "every dashboard query to return data (rejections, rounds, a "
                 "renewed budget)", interval=1.0, detail=lambda: f"missing: {missing}")
        # the render of that very range: the same evaluation times as the check that saw
        # everything (a later end moves them, and a series whose first rate was the check's
        # last point, e.g. the release lag first observed at the budget's renewal, the check's
        # last wait, can fall between two of them: no finite point)
        out = tmp_path / "render"
        assert dr.main(_args(port, out, scraped_since - LEAD, shown_until[0])) == 0

    summary = json.loads((out / "summary.json").read_text())
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    # every panel that queries (row headers do not), the released sums' band included
    assert [p["title"] for p in summary["panels"]] == [
        p["title"] for p in dashboard["panels"] if p["type"] != "row"]
    assert {"Released sum ± 2 sd", "Released sums ± 2 sd by group",
            "Released counts ± 2 sd by group"} <= {p["title"] for p in summary["panels"]}
    for panel in summary["panels"]:
        for target in panel["targets"]:
            where = f"{panel['title']} {target['refId']}: {target['query']}"
            assert target["error"] is None and target["series"] >= 1, where
            assert target["finite"] >= 1 and target["max"] is not None, where
            assert "$" not in target["query"], where
        _valid_png(out / panel["png"], min_size=(400, 200))
    _valid_png(out / "dashboard.png", min_size=(1000, 1000))


def _valid_png(path: Path, min_size: tuple[int, int]) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.size[0] >= min_size[0] and image.size[1] >= min_size[1], (path, image.size)
        low, high = image.convert("L").getextrema()
        assert high - low > 100, f"{path} is blank"


def test_renderer_runs_as_a_module_of_the_checkout_and_names_an_unreachable_prometheus(
        tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "deploy.grafana.render", "--prometheus", "http://127.0.0.1:1",
         "--out", str(tmp_path / "render")], cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "cannot reach Prometheus" in proc.stderr, proc.stderr
    assert dr.DEFAULT_DASHBOARD == DASHBOARD.resolve()
