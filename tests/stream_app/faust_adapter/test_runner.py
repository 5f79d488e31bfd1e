"""`pufferfish run`: start-up errors are one line + exit 2; SIGINT stops cleanly; loopback only."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics, topic_partitions
from stream_app.faust_adapter.runner import broker_wait
from tests.stream_app.worker_proc import (
    REPO,
    start_worker,
    worker_env,
)
from tests.waiting import wait_for


def run_cli(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stream_app", "run", *args], env=env, capture_output=True,
        text=True, timeout=timeout, cwd=str(REPO),
    )


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        ({"PUFFERFISH_DOMAIN": "[0.1, 1]"}, "domain: every value must be a multiple"),
        ({"PUFFERFISH_EPSILON": "-1"}, "epsilon:"),
        ({"PUFFERFISH_RULE": "magic"}, "rule:"),
        ({"PUFFERFISH_PRIOR_SOURCE": "declared"}, "priors_file:"),
        ({"PUFFERFISH_DOMAIN": "[1,"}, "domain: cannot parse"),
        ({"PUFFERFISH_EPSILON_LEARN": "0"}, "epsilon_learn:"),
        ({"PUFFERFISH_PRIOR_FLOOR": "1.5"}, "prior_floor:"),
        ({"PUFFERFISH_PRIORS_FILE": "{tmp}/outside.json"}, "priors_file.g.support: 7 is not"),
        ({"PUFFERFISH_PAIRS": '["distribution_change"]'}, "pairs: distribution_change needs"),
        ({"PUFFERFISH_PAIRS": '["value_presence"]', "PUFFERFISH_DOMAIN": "[0]"},
         "pairs: no configured pair needs noise"),
        ({"PUFFERFISH_PORTS_FILE": "{tmp}/missing/ports.json", "PUFFERFISH_METRICS_PORT": "0"},
         "ports_file: cannot write {tmp}/missing/ports.json: No such file or directory"),
    ],
)
def test_bad_settings_exit_2_one_line(
    tmp_path: Path, settings: dict[str, str], needle: str
) -> None:
    (tmp_path / "outside.json").write_text('{"g": {"support": [0, 7], "probs": [0.5, 0.5]}}')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env.update({"PUFFERFISH_BROKER": "kafka://127.0.0.1:1",
                **{k: v.replace("{tmp}", str(tmp_path)) for k, v in settings.items()}})
    proc = run_cli(env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pufferfish: error: "), proc.stderr
    assert needle.replace("{tmp}", str(tmp_path)) in lines[0] and "Traceback" not in proc.stderr


def test_secret_not_in_error_output(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO),
        "PUFFERFISH_SASL_PASSWORD": "s3cr3t-pw",
        "PUFFERFISH_BROKER_SECURITY_PROTOCOL": "SASL_SSL",
    }
    proc = run_cli(env)
    assert proc.returncode == 2 and "sasl_username" in proc.stderr
    assert "s3cr3t-pw" not in proc.stderr + proc.stdout


def test_an_unreachable_broker_is_one_line_within_the_timeout(closed_port: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env.update({"PUFFERFISH_METRICS_PORT": "off"})
    closed = closed_port  # held by the test, never listened on: nothing answers there
    started = time.monotonic()
    proc = run_cli(env, "--broker", f"kafka://127.0.0.1:{closed}", "--timeout", "5")
    took = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    # the last attempt's error: refused, or cut by the bound when the start-up took most of it
    assert re.fullmatch(rf"pufferfish: error: broker: kafka://127\.0\.0\.1:{closed} not "
                        r"reachable in 5 s \((KafkaConnectionError|TimeoutError)\): is it "
                        r"running\? [^\n]+\n",
                        proc.stderr), proc.stderr
    # the bound took effect: the default wait alone is 30 s (on an idle machine the whole
    # command takes about 5.6 s; under two CPU hogs and the suite up to 11 s)
    assert proc.stdout == "" and took < 25, took


def test_the_broker_is_tried_even_when_the_start_up_used_the_timeout() -> None:
    now = time.monotonic()
    # the start-up took 40 s of a 30 s timeout (a busy machine): the broker still gets 10 s
    assert broker_wait(30.0, now - 40.0) == 10.0
    assert broker_wait(5.0, now - 40.0) == 5.0  # never more than the timeout itself
    assert 27.9 < broker_wait(30.0, now - 2.0) <= 28.0  # otherwise what is left of it
    assert broker_wait(30.0, None) == 30.0


@pytest.mark.integration
def test_partition_mismatch_is_refused(broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(create_topics(broker.bootstrap, {"reports": 3}))
    env = worker_env(broker, tmp_path, app_id="mm", input_partitions="2")
    proc = run_cli(env)
    assert proc.returncode == 2
    assert "'reports' has 3 partitions, expected 2" in proc.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_creates_topics_serves_loopback_and_stops_on_sigint(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    env = worker_env(broker, tmp_path, app_id="sig", input_partitions="3", web_port="0",
                     topic_reports="in-r", topic_membership="in-m", topic_releases="out-r",
                     topic_deadletter="out-d", topic_partials="mid-p")
    worker = start_worker(env, tmp_path, "w")
    try:
        wait_for(lambda: bool(worker.samples()), 60, "metrics endpoint")
        parts = asyncio.run(topic_partitions(broker.bootstrap))
        assert {k: parts.get(k) for k in ("in-r", "in-m", "out-r", "out-d", "mid-p")} == {
            "in-r": 3, "in-m": 3, "out-r": 1, "out-d": 1, "mid-p": 1,
        }
        wait_for(lambda: "Worker ready" in worker.log_path.read_text(errors="replace"), 60,
                 "worker ready")
        listening = _listening_ports(worker.proc.pid)
        assert listening, "the worker listens on nothing (metrics expected)"
        assert all(host == "127.0.0.1" for host, _ in listening), listening
        assert ("127.0.0.1", worker.metrics_port) in listening
        web_port = worker.port("web")  # reported once it listens
        assert ("127.0.0.1", web_port) in _listening_ports(worker.proc.pid)
        assert web_port != worker.metrics_port
        assert all(host == "127.0.0.1" for host, _ in _listening_ports(worker.proc.pid))
    finally:
        rc = worker.stop(signal.SIGINT)
    assert rc == 0, worker.log()


def _listening_ports(pid: int) -> set[tuple[str, int]]:
    """(host, port) of the TCP sockets process `pid` listens on (from /proc, IPv4 + IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A = LISTEN
                continue
            hexip, hexport = local.split(":")
            if width == 8:
                host = ".".join(str(int(hexip[i:i + 2], 16)) for i in (6, 4, 2, 0))
            else:
                host = "::" if int(hexip, 16) == 0 else hexip
            out.add((host, int(hexport, 16)))
    return out
