"""The pure helpers the benchmarks rely on (expected values worked out by hand)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import _common, harness, profiler, runs, timing, worker_pipeline
from bench.markers import marker_latencies, marker_step, separable
from bench.profiler import top_frames
from bench.timing import cpu_per_event, rate_between
from stream_app.metrics_page import fetch, local_url
from stream_app.settings import Settings


def test_write_section_replaces_only_its_own_section(tmp_path: Path) -> None:
    path = tmp_path / "R.md"
    _common.write_section(path, "a", "<!-- bench:a start -->\nA1\n<!-- bench:a end -->\n")
    _common.write_section(path, "b", "<!-- bench:b start -->\nB1\n<!-- bench:b end -->\n")
    _common.write_section(path, "a", "<!-- bench:a start -->\nA2\n<!-- bench:a end -->\n")
    text = path.read_text()
    assert "A1" not in text and text.count("A2") == 1 and text.count("B1") == 1
    assert text.index("A2") < text.index("B1")  # replaced in place, not appended


def test_marker_included_once_the_noisy_sum_reaches_its_value() -> None:
    values = [1024.0, 2048.0, 3072.0]  # step 1024, background part <= 100
    assert separable(1024.0, 100.0, 1e-5) and not separable(1024.0, 100.0, 30.0)
    releases = [
        {"ts": 10.0, "noisy_sum": 1024.0 + 90, "theta": 1e-5},  # marker 0 + background
        {"ts": 11.0, "noisy_sum": 2048.0 - 3, "theta": 1.0},  # marker 1, noise -3 (bound ~21)
        {"ts": 12.0, "noisy_sum": 3072.0 + 5, "theta": 1e-5},
    ]
    # marker 1 sent at 10.2: the release at 11.0 is the first at or above 2048 - bound
    assert marker_latencies(releases, values, [10.2], first=1) == [11.0 - 10.2]
    # a release published before the marker was sent never counts
    assert marker_latencies(releases, values, [11.5], first=1) == [12.0 - 11.5]
    assert math.isnan(marker_latencies(releases[:1], values, [10.2], first=1)[0])
    assert marker_step(40) == 4096.0  # first power of two above 4 * (15 * 40 + 1)


def test_rate_between_uses_the_crossing_samples() -> None:
    samples = [(0.0, 0.0), (1.0, 100.0), (2.0, 300.0), (3.0, 600.0)]
    assert rate_between(samples, 50, 550) == (600 - 100) / (3.0 - 1.0)
    # both marks crossed by one sample: measured from the sample before it
    assert rate_between(samples, 350, 550) == (600 - 300) / (3.0 - 2.0)


def test_top_frames_own_and_inclusive() -> None:
    collapsed = (
        "main (stream_app/faust_adapter/runner.py:10);handle (stream_app/worker.py:5);"
        "dumps (json/__init__.py:1) 3\n"
        "main (stream_app/faust_adapter/runner.py:10);select (selectors.py:4) 1\n"
    )
    own, incl, total = top_frames(collapsed)
    assert total == 4
    assert own[0] == ("dumps (json/__init__.py)", 75.0)
    # the entry point (runner) wraps every sample: left out of the inclusive list
    assert dict(incl) == {"handle (stream_app/worker.py)": 75.0}


class _FakePipeline:
    """Handles a record as soon as the fake producer sends it."""

    def __init__(self) -> None:
        self.count = 0.0

    def handled(self) -> float:
        return self.count

    def counts(self) -> tuple[float, float]:
        return self.count, self.count * 4e-6  # 4 us per record in the input path

    def cpu_seconds(self) -> float:
        return self.count * 1e-5  # 10 us per record

    def check_alive(self) -> None:
        pass


def test_the_backlog_is_sampled_while_it_is_produced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline as fast as its producer: sampled only after production, both marks would fall
    before the first sample and the rate would read 0."""
    pipe = _FakePipeline()

    def produce(bootstrap: str, topics: dict[str, str], events: list[int]) -> int:
        for _ in range(10):
            time.sleep(0.1)
            pipe.count += len(events) / 10
        return len(events)

    monkeypatch.setattr(timing, "produce_sync", produce)
    broker_seconds = iter(range(0, 10**6, 5))  # 5 ms of broker CPU per sample
    samples, produced_at = timing.produce_and_drain(
        "b", {}, list(range(1000)), pipe, 0, timeout=10,  # type: ignore[arg-type]
        broker_cpu=lambda: next(broker_seconds) / 1000)
    assert len(samples) >= 3 and samples[0][1] < 950
    assert samples[0][0] < produced_at
    # all was handled while it was produced: read from the 5 % mark
    assert timing.start_mark(samples, produced_at, 0, 1000) == 50
    rate = rate_between(samples, 50, 950)
    assert 500 < rate < 2000  # 1000 records in ~1 s, sampled every 0.25 s
    assert cpu_per_event(samples, 50, 950) == pytest.approx(10.0)
    assert cpu_per_event(samples, 50, 950, column=4) == pytest.approx(4.0)
    # the broker's column: 5 ms per 0.25 s sample over the events between the same samples
    i = next(k for k, x in enumerate(samples) if x[1] >= 50)
    j = next(k for k, x in enumerate(samples) if x[1] >= 950)
    assert j > i
    assert cpu_per_event(samples, 50, 950, column=3) == pytest.approx(
        5000.0 * (j - i) / (samples[j][1] - samples[i][1]))


def test_a_failed_producer_stops_the_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    def produce(bootstrap: str, topics: dict[str, str], events: list[int]) -> int:
        raise ConnectionError("no broker")

    monkeypatch.setattr(timing, "produce_sync", produce)
    with pytest.raises(RuntimeError, match="producing the backlog failed"):
        timing.produce_and_drain("b", {}, [1, 2], _FakePipeline(),  # type: ignore[arg-type]
                                     0, timeout=5)


def test_the_rate_is_read_once_the_backlog_is_produced_when_enough_is_left() -> None:
    samples = [(0.0, 100.0, 0.0), (1.0, 300.0, 0.0), (2.0, 500.0, 0.0), (3.0, 1000.0, 0.0)]
    # produced at 1.5 s: 500 of 1000 handled by the next sample, 50 % left -> from there
    assert timing.start_mark(samples, 1.5, 0, 1000) == 500
    assert rate_between(samples, 500, 950) == 500.0
    # produced at 2.5 s: nothing sampled with >= 35 % left afterwards -> the 5 % mark
    assert timing.start_mark(samples, 2.5, 0, 1000) == 50
    # produced before the first sample: the 5 % mark is later than that sample
    assert timing.start_mark([(1.0, 10.0, 0.0), *samples[1:]], 0.5, 0, 1000) == 50


def test_profile_report_prints_and_returns_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    own = [("dumps (json/__init__.py)", 75.0)]
    incl = [("handle (stream_app/worker.py)", 75.0)]
    md = profiler.report((own, incl, 4), "w1", 100, m=400)
    out = capsys.readouterr().out
    assert "py-spy on w1 (4 samples at 100 Hz)" in out and "dumps (json/__init__.py)" in out
    assert "**Profile** (py-spy record --nonblocking at 100 Hz on w1 while it drains a " \
        "further 200 events; 4 samples)" in md
    assert "| handle (stream_app/worker.py) | 75 |" in md


def test_worker_settings_text_reads_the_defaults_from_settings() -> None:
    text = worker_pipeline.settings_text()
    fields = Settings.model_fields
    assert text.startswith("4 input partitions, domain K = 16, pairs distribution_presence, "
                           "rule exact, one group")
    assert f"batch_max_events {fields['batch_max_events'].default}," in text
    assert text.endswith(f"{fields['event_loop'].default})")


def test_every_pipeline_gets_its_topics_and_the_worker_settings() -> None:
    topics = harness.topic_names("t1", "-w1")
    assert topics["reports"] == "reports-t1" and topics["releases"] == "releases-t1-w1"
    assert [r.name for r in runs.all_runs(runs.STORES)] == list(runs.RUN_NAMES)
    assert runs.all_runs()[-1].cmd == worker_pipeline.WORKER_CMD


SERVE_ON_PORT_0 = (  # a stand-in pipeline: /metrics on the port the OS gives, reported
    "import os, time\n"
    "from pathlib import Path\n"
    "from prometheus_client import start_http_server\n"
    "from stream_app.faust_adapter.ports_file import PortsFile\n"
    "server, _ = start_http_server(int(os.environ['PUFFERFISH_METRICS_PORT']), addr='127.0.0.1')\n"
    "ports = PortsFile(Path(os.environ['PUFFERFISH_PORTS_FILE']))\n"
    "ports.start()\n"
    "ports.listening('metrics', server.server_port)\n"
    "time.sleep(60)\n")


def test_a_pipeline_serves_its_metrics_on_the_port_it_reports(tmp_path: Path) -> None:
    """Its /metrics binds port 0 (no port is chosen first and taken by a parallel test before
    it binds): the harness reads the port from the pipeline's ports file."""
    script = tmp_path / "serve.py"
    script.write_text(SERVE_ON_PORT_0)
    broker = SimpleNamespace(url="kafka://127.0.0.1:1")
    worker = harness.start_pipeline(
        broker, tmp_path, "t", [str(script), "serve"])  # type: ignore[arg-type]
    try:
        assert worker.proc.poll() is None and fetch(local_url(worker.metrics_port)) is not None
    finally:
        worker.proc.kill()
        worker.proc.wait()


def test_a_pipeline_that_exits_before_reporting_its_port_is_named(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import sys\nprint('no broker here')\nsys.exit(3)\n")
    broker = SimpleNamespace(url="kafka://127.0.0.1:1")
    with pytest.raises(RuntimeError, match=r"exited with 3 before its ports file named its "
                       r"metrics port (?s:.*)no broker here"):
        harness.start_pipeline(broker, tmp_path, "t", [str(script), "fail"])  # type: ignore[arg-type]
