"""The pure helpers the benchmarks rely on (expected values worked out by hand)."""

from __future__ import annotations

import math
from pathlib import Path

from bench import _common
from bench.latency import marker_latencies
from bench.throughput import rate_between, top_frames


def test_write_section_replaces_only_its_own_section(tmp_path: Path) -> None:
    path = tmp_path / "R.md"
    _common.write_section(path, "a", "<!-- bench:a start -->\nA1\n<!-- bench:a end -->\n")
    _common.write_section(path, "b", "<!-- bench:b start -->\nB1\n<!-- bench:b end -->\n")
    _common.write_section(path, "a", "<!-- bench:a start -->\nA2\n<!-- bench:a end -->\n")
    text = path.read_text()
    assert "A1" not in text and text.count("A2") == 1 and text.count("B1") == 1
    assert text.index("A2") < text.index("B1")  # replaced in place, not appended


def test_marker_included_only_once_theta_passes_its_midpoint() -> None:
    thetas = [16.0, 17.0, 18.0]
    releases = [{"ts": 10.0, "theta": 16.0}, {"ts": 11.0, "theta": 17.0}, {"ts": 12.0, "theta": 18}]
    # marker 1 (theta 17) sent at 10.2: the release at 11.0 is the first above 16.5
    assert marker_latencies(releases, thetas, [10.2], first=1) == [11.0 - 10.2]
    assert math.isnan(marker_latencies(releases[:1], thetas, [10.2], first=1)[0])


def test_rate_between_uses_the_crossing_samples() -> None:
    samples = [(0.0, 0.0), (1.0, 100.0), (2.0, 300.0), (3.0, 600.0)]
    assert rate_between(samples, 50, 550) == (600 - 100) / (3.0 - 1.0)


def test_top_frames_own_and_inclusive() -> None:
    collapsed = (
        "main (stream_app/runner.py:10);handle (stream_app/app.py:5);dumps (json/__init__.py:1) 3\n"
        "main (stream_app/runner.py:10);select (selectors.py:4) 1\n"
    )
    own, incl, total = top_frames(collapsed)
    assert total == 4
    assert own[0] == ("dumps (json/__init__.py)", 75.0)
    # the entry point (runner) wraps every sample: left out of the inclusive list
    assert dict(incl) == {"handle (stream_app/app.py)": 75.0}
