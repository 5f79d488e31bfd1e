"""scripts/failures.py: the last lines of CI's output name every test that did not pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" tests="3">
<testcase classname="tests.bench.test_smoke" name="test_throughput_quick" time="240">
<failure message="Failed: Timeout (&gt;240.0s)&#10;diagnostics (SIGUSR1)&#10;64 tasks">text
</failure>
</testcase>
<testcase classname="tests.reliability.test_chaos" name="test_chaos[memory]" time="1">
<error message="failed on setup with &quot;broker not reachable&quot;">trace</error>
</testcase>
<testcase classname="tests.core.test_plan" name="test_draw" time="0.1"/>
</testsuite></testsuites>
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "failures.py"), *args],
                          capture_output=True, text=True, timeout=60)


def test_names_each_failure_and_error_on_one_line(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(REPORT)
    done = run(str(report))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "2 tests did not pass:",
        "FAILED tests/bench/test_smoke::test_throughput_quick: Failed: Timeout (>240.0s) "
        "diagnostics (SIGUSR1) 64 tasks",
        'ERROR tests/reliability/test_chaos::test_chaos[memory]: failed on setup with '
        '"broker not reachable"',
    ]


def test_a_green_report_prints_nothing(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text('<testsuites><testsuite><testcase classname="a" name="b"/></testsuite>'
                      "</testsuites>")
    done = run(str(report))
    assert (done.returncode, done.stdout) == (0, "")


def test_a_long_message_is_cut_to_one_short_line(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text('<testsuites><testsuite><testcase classname="a" name="b">'
                      f'<failure message="{"x" * 5000}"/></testcase></testsuite></testsuites>')
    line = run(str(report)).stdout.splitlines()[1]
    assert line.startswith("FAILED a::b: xxx") and len(line) == 200


def test_an_unreadable_report_is_one_line_exit_2(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text("<testsuites>")
    done = run(str(report))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
