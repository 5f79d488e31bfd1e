"""``pufferfish send`` feeds a real worker, ``pufferfish tail`` reads its releases.

Joins from a file, reports from stdin, both through ``send`` as subprocesses with the worker's
own settings; every record is accepted (nothing dead-lettered, in particular no
``wrong_partition``), the summaries match what the broker holds, and ``tail`` reads the
releases: history with --from-beginning, new ones by default, whose noisy sums are the test's
own sum of the latest values within the noise bound; Ctrl-C ends it quietly.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import ConsumerRecord

from stream_app.demo.broker import EmbeddedBroker
from stream_app.metrics_page import totals
from tests.kafka_helpers import read_to_end
from tests.stream_app.tools.cli_proc import java_partition, jsonl, pufferfish, summary
from tests.stream_app.worker_proc import (
    input_env,
    noise_bound,
    start_worker,
    wait_handled,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PARTS = 4
USERS = [f"user-{i}" for i in range(24)]
SETTINGS = {
    "app_id": "send-tail", "domain": [0, 1, 2], "pairs": ["value_presence"], "rule": "bound",
    "epsilon": "8", "budget_total": "100000", "release_period_seconds": "0.5",
}
THETA = 2 / 8  # bound rule, value_presence: max |a| / epsilon


def _acked(records: list[ConsumerRecord[bytes, bytes]]) -> dict[str, int]:
    return dict(Counter(str(r.partition) for r in records))


def _check_topic(bootstrap: str, topic: str, got: dict[str, Any]) -> None:
    """Every record on its contract partition; the summary is what the broker holds."""
    records = asyncio.run(read_to_end(bootstrap, topic))
    for rec in records:
        assert rec.key is not None and rec.partition == java_partition(rec.key.decode(), PARTS)
    assert got["topics"][topic] == {"partitions": PARTS, "acknowledged": _acked(records)}


@pytest.mark.slow
def test_send_feeds_a_worker_and_tail_reads_its_releases(broker: EmbeddedBroker,
                                                         tmp_path: Path) -> None:
    env = input_env(broker, tmp_path, partitions=PARTS, **SETTINGS)
    worker = start_worker(env, tmp_path, "w")
    now = time.time()
    joins = [{"user_id": u, "event": "join", "ts": now} for u in USERS]
    reports = [{"user_id": u, "value": (i + k) % 3, "report_id": f"{u}-{k}", "ts": now + k}
               for k in range(2) for i, u in enumerate(USERS)]
    expected_x = sum((i + 1) % 3 for i in range(len(USERS)))  # each user's latest value
    try:
        join_file = tmp_path / "joins.jsonl"
        join_file.write_text(jsonl(joins))
        sent = pufferfish(["send", str(join_file)], env)
        assert sent.returncode == 0 and sent.stderr == "", sent.stderr
        got = summary(sent)
        assert (got["lines"], got["acknowledged"], got["skipped"]) == (len(USERS), len(USERS), 0)
        assert got["topics"]["reports"]["acknowledged"] == {}
        _check_topic(broker.bootstrap, "membership", got)
        wait_handled([worker], len(joins), timeout=90)

        sent = pufferfish(["send", "-"], env, stdin=jsonl(reports))
        assert sent.returncode == 0 and sent.stderr == "", sent.stderr
        got = summary(sent)
        assert got["acknowledged"] == len(reports) and got["failed"] == 0
        _check_topic(broker.bootstrap, "reports", got)
        wait_handled([worker], len(joins) + len(reports), timeout=90)

        counted = totals(worker.samples())
        assert counted.get("pufferfish_events_applied_total") == len(joins) + len(reports)
        assert counted.get("pufferfish_events_rejected_total", 0.0) == 0.0
        dead = [json.loads(r.value) for r in asyncio.run(read_to_end(broker.bootstrap,
                                                                     "deadletter"))]
        assert not [d for d in dead if d["reason"] == "wrong_partition"], dead
        assert dead == []

        # new releases only (the default): published after everything above was handled
        handled_at = time.time()
        tailed = pufferfish(["tail", "--json", "--max", "3", "--topics", "releases"], env)
        assert tailed.returncode == 0 and tailed.stderr == "", tailed.stderr
        new = [json.loads(line) for line in tailed.stdout.splitlines()]
        assert len(new) == 3 and all(r["ts"] > handled_at for r in new), new
        assert [r["seq"] for r in new] == list(range(new[0]["seq"], new[0]["seq"] + 3))
        assert {r["theta"] for r in new} == {THETA}
        # the last one is surely after the partials of every handled record reached the releaser
        assert abs(new[-1]["noisy_sum"] - expected_x) <= noise_bound(THETA, 1), new[-1]

        history = pufferfish(["tail", "--json", "--from-beginning", "--max", "2"], env)
        assert history.returncode == 0 and history.stderr == "", history.stderr
        assert [json.loads(line)["seq"] for line in history.stdout.splitlines()] == [1, 2]

        human = pufferfish(["tail", "--from-beginning", "--max", "1", "--topics", "releases"],
                           env)
        assert human.returncode == 0, human.stderr
        line = re.fullmatch(r"release seq=1 tick=\d+ theta=0\.25 noisy_sum=\S+ ± (\S+) "
                            r"noise_sd=(\S+) charge=\S+ epsilon_spent=\S+/100000 priors_seq=0\n",
                            human.stdout)
        assert line, human.stdout
        # one draw: Pr[|L| > x] = e^-x gives 0.25 ln 20, plus one grid step; sd ~ sqrt(2) theta
        assert float(line[1]) == pytest.approx(0.25 * math.log(20) + 2.0**-10, abs=1e-4)
        assert float(line[2]) == pytest.approx(math.sqrt(2) * 0.25, abs=1e-3)

        follower = subprocess.Popen(
            [sys.executable, "-m", "stream_app", "tail", "--topics", "releases"], env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert follower.stdout is not None
            assert follower.stdout.readline().startswith("release seq=")  # it is following
            follower.send_signal(signal.SIGINT)
            assert follower.wait(timeout=30) == 0
            assert follower.stderr is not None and follower.stderr.read() == ""
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait(timeout=10)
    finally:
        worker.stop()
