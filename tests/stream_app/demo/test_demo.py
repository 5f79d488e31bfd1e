"""`pufferfish demo`: the rolling population (unit), argument errors, and a real end-to-end run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from stream_app.demo.demo import main
from stream_app.demo.population import SETTLE_SECONDS, Event, Population
from stream_app.metrics_page import scrape
from tests.processes import pid_alive
from tests.stream_app.contracts.contract_files import errors

ROOT = Path(__file__).resolve().parents[3]
RELEASE = re.compile(
    r"^release seq=(\d+) theta=(\S+) noisy_sum=(\S+) priors_seq=(\d+) epsilon_left=(\S+)$",
    re.MULTILINE,
)


# --- the population schedule (no broker) -------------------------------------------------------

def _simulate(users: int, events: int, step: float, seed: int = 1) -> list[tuple[float, Event]]:
    values = np.arange(1, 17).repeat(3)  # 48 rows: 1,1,1,2,2,2,...
    pop = Population([f"u{i}" for i in range(users)], values, seed=seed)
    now = 0.0
    out: list[tuple[float, Event]] = [(now, e) for e in pop.initial_joins(now)]
    while len(out) < events:
        now += step
        event = pop.next_event(now)
        if event is not None:
            out.append((now, event))
    return out


LEARNING_ROUND = re.compile(
    r"^learning round seq=(\d+) group=(\S+) epsilon_learn=(\S+) status=(learned|low_mass|void) "
    r"radius=(\S+) law=\{.*\}$", re.MULTILINE
)


def test_population_respects_membership_and_replays_rows_in_order() -> None:
    users, step = 20, 0.01
    timeline = _simulate(users, 6000, step)
    present: dict[str, bool] = {}
    joined_at: dict[str, float] = {}
    last_report: dict[str, float] = {}
    reported_values = []
    counts = {"join": 0, "leave": 0, "report": 0}
    for now, e in timeline:
        counts[e.kind] += 1
        if e.kind == "join":
            assert not present.get(e.user_id, False), f"{e.user_id} joined twice"
            present[e.user_id] = True
            joined_at[e.user_id] = now
        elif e.kind == "leave":
            assert present.get(e.user_id), f"{e.user_id} left while absent"
            assert now - last_report[e.user_id] >= SETTLE_SECONDS - 1e-9
            present[e.user_id] = False
        else:
            assert present.get(e.user_id), f"{e.user_id} reported while absent"
            assert now - joined_at[e.user_id] >= SETTLE_SECONDS - 1e-9
            last_report[e.user_id] = now
            reported_values.append(e.value)
            assert e.report_id == f"r{len(reported_values)}"
    # The first events are everybody's join; then rows in data-set order, wrapping around.
    assert [e.kind for _, e in timeline[:users]] == ["join"] * users
    expected = [v for _ in range(200) for v in range(1, 17) for _ in range(3)]
    assert reported_values == expected[: len(reported_values)]
    # Users do leave and come back (rolling population).
    assert counts["leave"] > 10
    assert counts["join"] > users


def test_population_payloads_match_topic_schemas() -> None:
    pop = Population(["a"], np.array([7]))
    join = pop.initial_joins(0.0)[0]
    assert join.payload(1.5) == {"user_id": "a", "event": "join", "ts": 1.5}
    assert pop.next_event(0.0) is None  # not settled yet
    report = pop.next_event(SETTLE_SECONDS)
    assert report is not None
    assert report.payload(2.0) == {"user_id": "a", "value": 7, "report_id": "r1", "ts": 2.0}


def test_population_with_groups_joins_each_user_to_its_group_again_and_again() -> None:
    """--by-group: user i joins groups[i % 2] at the start and at every rejoin."""
    pop = Population(["a", "b", "c"], np.array([7]), groups=("even", "odd"))
    joins = pop.initial_joins(0.0)
    assert [j.payload(1.0)["group"] for j in joins] == ["even", "odd", "even"]
    assert errors("membership", joins[1].payload(1.0)) == []
    pop.leaving.add("b")
    pop._apply(Event("leave", "b"), 5.0)  # a leave schedules the rejoin (2 to 10 s later)
    joined = [(e.user_id, e.payload(2.0)["group"]) for e in
              (pop.next_event(float(now)) for now in range(6, 40)) if e and e.kind == "join"]
    assert ("b", "odd") in joined
    assert all(group == {"a": "even", "b": "odd", "c": "even"}[u] for u, group in joined)


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--users", "0"], "users"),
        (["--rate", "-1"], "rate"),
        (["--epsilon", "nan"], "epsilon"),
        (["--budget", "inf"], "budget"),
        (["--duration", "0"], "duration"),
        (["--window", "0"], "window"),
        (["--max-changes", "-1"], "max-changes"),
        (["--mechanism", "matrix"], "arguments"),
        (["--release-period", "0"], "release-period"),
        (["--learn-period", "-2"], "learn-period"),
        (["--epsilon-learn", "inf"], "epsilon-learn"),
        (["--metrics-port", "70000"], "metrics-port"),
        (["--bogus"], "arguments"),
        (["--users", "many"], "arguments"),
        (["--by-group"], "by-group"),  # the tree (the default) has no per-group releases
    ],
)
def test_bad_arguments_one_line_exit_2(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pufferfish: error: {field}: ")
    assert err.count("\n") == 1 and "Traceback" not in err


# --- end to end: broker + worker + producer subprocesses ---------------------------------------

class _Output:
    """Collects a subprocess's output lines in a thread, so waits can be bounded."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def drain(self, timeout: float = 30.0) -> None:
        """Wait until the process closed its output (the reader thread read every line)."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"timed out after {timeout:g} s waiting for EOF"

    @property
    def text(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_for(self, pattern: str, count: int, timeout: float) -> list[re.Match[str]]:
        regex = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = list(regex.finditer("\n".join(self.lines)))
                if len(found) >= count or time.monotonic() > deadline:
                    return found
                self._cond.wait(timeout=0.5)


def _start_demo(*args: str) -> tuple[subprocess.Popen[str], _Output]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "stream_app", "demo", "--metrics-port", "0", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    return proc, _Output(proc)


def _child_pids(out: _Output) -> list[int]:
    broker = out.wait_for(r"^broker: .* \(pid (\d+),", 1, timeout=60)
    worker = out.wait_for(r"^worker: pid (\d+),", 1, timeout=60)
    assert broker and worker, "timed out after 60 s waiting for the broker and worker pids:\n" + (
        out.text)
    return [int(broker[0].group(1)), int(worker[0].group(1))]


def _cleanup(proc: subprocess.Popen[str], pids: list[int]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    for pid in pids:  # only if the demo failed to stop them; never by name
        if pid_alive(pid):
            os.killpg(pid, signal.SIGKILL)


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.slow
def test_demo_end_to_end_and_sigint() -> None:
    # No --duration (until Ctrl-C): the test interrupts the demo after three releases,
    # whenever they come (a fixed duration raced against a slow start-up). --quiet: the terse
    # line formats of before the exact sums (test_demo_truth.py checks the full output).
    proc, out = _start_demo("--mechanism", "independent", "--users", "50", "--rate", "200",
                            "--release-period", "2", "--learn-period", "4", "--quiet",
                            "--no-plot")
    pids: list[int] = []
    try:
        pids = _child_pids(out)
        metrics_url = out.wait_for(r"^metrics: (http://127\.0\.0\.1:\d+/metrics)$", 1, 60)
        assert metrics_url, "timed out after 60 s waiting for the metrics URL:\n" + out.text
        releases = out.wait_for(RELEASE.pattern, 3, timeout=90)
        assert len(releases) >= 3, "timed out after 90 s waiting for 3 releases:\n" + out.text
        rounds = out.wait_for(LEARNING_ROUND.pattern, 1, timeout=60)
        assert rounds, "timed out after 60 s waiting for a learning round:\n" + out.text
        assert proc.poll() is None, "demo ended before it could be interrupted:\n" + out.text

        total = scrape(metrics_url[0].group(1), timeout=5).get(("pufferfish_releases_total", ()))
        assert total is not None and total > 0

        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=30)  # a prompt stop; TimeoutExpired names the wait
        assert rc == 0, out.text
    finally:
        _cleanup(proc, pids)
    out.drain()
    text = out.text
    assert "Traceback" not in text, text
    for pid in pids:
        assert not pid_alive(pid), f"process {pid} left over:\n{text}"

    parsed = [(int(m[1]), float(m[2]), float(m[5])) for m in RELEASE.finditer(text)]
    assert max(int(m[4]) for m in RELEASE.finditer(text)) >= 1  # theta from a learning round
    seqs = [p[0] for p in parsed]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(theta > 0 for _, theta, _ in parsed)
    left = [p[2] for p in parsed]
    assert all(b < a for a, b in zip(left, left[1:], strict=False)), left
    assert re.search(r"^stopped: sent \d+ events", text, re.MULTILINE), text
    assert "exact" not in text and "plot" not in text, text  # --quiet, --no-plot


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_demo_stops_by_itself_after_duration(tmp_path: Path) -> None:
    plot = tmp_path / "demo.png"
    proc, out = _start_demo("--duration", "8", "--users", "5", "--rate", "50", "--plot", str(plot))
    pids: list[int] = []
    try:
        pids = _child_pids(out)
        rc = proc.wait(timeout=8 + 120)  # the 8 s run plus a generous start-up and stop
    finally:
        _cleanup(proc, pids)
    out.drain()
    assert rc == 0, out.text
    assert "duration of 8 s reached" in out.text
    assert re.search(rf"^plot: {re.escape(str(plot))} ", out.text, re.MULTILINE), out.text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Traceback" not in out.text
    for pid in pids:
        assert not pid_alive(pid)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_ends_by_itself_once_the_budget_is_spent(tmp_path: Path) -> None:
    """Independent releases, no --duration: the installed command ends on its own, exit 0,
    after its last release (budget 4 = two ticks of a learning round and a release, epsilon 1
    each: a learning period of one tick, so that the public clock's phase cannot put a round
    last), and says where the PNG is."""
    from tests.installed_cli import CONSOLE_SCRIPT, user_env

    plot = tmp_path / "demo.png"
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "demo", "--mechanism", "independent", "--metrics-port", "0",
         "--budget", "4", "--release-period", "1", "--learn-period", "1", "--users", "20",
         "--rate", "50", "--plot", str(plot)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=user_env())
    out = _Output(proc)
    pids: list[int] = []
    try:
        pids = _child_pids(out)
        rc = proc.wait(timeout=240)  # start-up, ~3 s of releases and the stop, on a busy machine
    finally:
        _cleanup(proc, pids)
    out.drain()
    text = out.text
    assert rc == 0, text
    assert "budget spent: no more releases; the demo ends" in text, text
    spent = re.findall(r"^release seq=\d+ .* epsilon_spent=(\S+)/4 ", text, re.MULTILINE)
    # the last release shown, before the end: 4 spent, or 3 when a round took the last unit
    assert spent and float(spent[-1]) in (3.0, 4.0), text
    if float(spent[-1]) == 3.0:
        assert "learning round seq=2 " in text, text
    assert re.search(rf"^plot: {re.escape(str(plot))} ", text, re.MULTILINE), text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Traceback" not in text and "pufferfish: error" not in text, text
    for pid in pids:
        assert not pid_alive(pid)


# --- the release mechanism's defaults -----------------------------------------------------------

def test_tree_is_the_default_and_a_flag_wins() -> None:
    import argparse

    from stream_app.demo import demo_defaults
    from stream_app.demo.demo import _parser

    args = _parser().parse_args([])
    demo_defaults.fill(args, now=1_000_050.0)  # 10 s into the window [999,960, 1,000,080)
    assert (args.mechanism, args.release_period, args.learn_period, args.epsilon_learn,
            args.budget, args.window, args.max_changes) == ("tree", 1.0, 30.0, 0.5, 10.0,
                                                            120.0, 4)
    # the first window ending at least 60 s later: 1,000,080 is 30 s away, so 1,000,200
    assert args.duration == 150.0
    given = _parser().parse_args(["--budget", "7", "--duration", "9", "--window", "60"])
    demo_defaults.fill(given, now=0.0)
    assert (given.budget, given.duration, given.window) == (7.0, 9.0, 60.0)
    plain = _parser().parse_args(["--mechanism", "independent"])
    demo_defaults.fill(plain, now=0.0)
    assert (plain.release_period, plain.learn_period, plain.epsilon_learn, plain.budget,
            plain.window, plain.duration) == (5.0, 10.0, 1.0, 50.0, None, None)
    assert isinstance(plain, argparse.Namespace)


@pytest.mark.parametrize(("now", "window", "left"), [
    (0.0, 120.0, 120.0),      # at a window's start: that window (120 >= 60)
    (59.0, 120.0, 61.0),      # 61 s left: still this one
    (61.0, 120.0, 179.0),     # 59 s left: the next one
    (1_000_050.0, 120.0, 150.0),
])
def test_until_window_end(now: float, window: float, left: float) -> None:
    from stream_app.demo.demo_defaults import until_window_end

    assert until_window_end(now, window) == pytest.approx(left)


@pytest.mark.integration
@pytest.mark.timeout(240)
@pytest.mark.slow
def test_tree_demo_ends_by_itself_at_its_window_end(tmp_path: Path) -> None:
    # The tree's defaults with a 20 s window: the run ends at a window's end (10-30 s in),
    # exit 0, a PNG; each release adds up the draws of its tree nodes.
    plot = tmp_path / "demo.png"
    proc, out = _start_demo("--window", "20", "--users", "20", "--rate", "40", "--plot",
                            str(plot))
    pids: list[int] = []
    try:
        pids = _child_pids(out)
        rc = proc.wait(timeout=30 + 150)  # the run plus a generous start-up and stop
    finally:
        _cleanup(proc, pids)
    out.drain()
    text = out.text
    assert rc == 0, text
    assert re.search(r"^release mechanism: tree over privacy windows of 20 s, budget 10 per "
                     r"window, max_changes_per_window 4: noise sd \S+ per release \(arity "
                     r"\d+\); independent releases at the same budget: sd \S+$", text, re.M), text
    assert re.search(r"^duration of \S+ s reached$", text, re.M), text
    draws = [int(d) for d in re.findall(r"^release seq=\d+ .* draws=(\d+) sd=", text, re.M)]
    assert draws and max(draws) >= 2, text
    assert re.search(rf"^plot: {re.escape(str(plot))} \(noisy vs exact sum, ±2 sd bands, "
                     r"independent releases' band, epsilon spent\)$", text, re.M), text
    assert plot.stat().st_size > 20_000
    for pid in pids:
        assert not pid_alive(pid), f"process {pid} left over:\n{text}"
