"""``pufferfish send`` and ``tail`` on the embedded broker without a worker: skipped lines,
unreachable brokers, a topic created after ``tail`` started, dead letters."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics
from tests.kafka_helpers import produce_json, read_to_end
from tests.stream_app.tools.cli_proc import (
    broker_env,
    java_partition,
    plain_env,
    pufferfish,
    summary,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

GOOD = {
    1: {"user_id": "alice", "event": "join", "ts": 1.0},
    3: {"user_id": "alice", "value": 1, "report_id": "a-1", "ts": 2.0},
    7: {"user_id": "carol", "event": "join", "group": "g", "ts": 1.0, "topic": "membership"},
    9: {"user_id": "erin", "value": 0, "report_id": "e-1", "ts": 3.0, "topic": "reports"},
}
BAD = {
    2: ("{bad", "malformed_json"),
    5: ('{"user_id": "bob", "value": "x", "report_id": "r", "ts": 1}', "invalid_schema"),
    6: ("[1, 2]", "invalid_schema"),
    8: ('{"user_id": "dan", "value": NaN, "report_id": "r", "ts": 1}', "non_finite_value"),
    10: ('{"user_id": "u1", "value": 3', "malformed_json"),  # the brace missing at the end
}


def _input() -> str:
    lines = []
    for n in range(1, 11):
        lines.append(json.dumps(GOOD[n]) if n in GOOD else BAD[n][0] if n in BAD else "")
    return "\n".join(lines) + "\n"


def test_bad_lines_are_reported_skipped_and_counted(broker: EmbeddedBroker,
                                                    tmp_path: Path) -> None:
    # 3 partitions while the settings say input_partitions 4: the broker's count decides
    asyncio.run(create_topics(broker.bootstrap, {"reports": 3, "membership": 3}))
    config = tmp_path / "send.json"
    config.write_text(json.dumps({"broker": broker.url}))
    data = tmp_path / "in.jsonl"
    data.write_text(_input())
    proc = pufferfish(["send", "--config", str(config), str(data)], plain_env())
    assert proc.returncode == 1, proc.stderr
    errors = proc.stderr.splitlines()
    assert len(errors) == len(BAD), proc.stderr
    for line, (n, (_, reason)) in zip(errors, sorted(BAD.items()), strict=True):
        assert line.startswith(f"pufferfish: error: line {n}: {reason}: "), line
        assert line.endswith("(skipped)")
    assert errors[-1] == ("pufferfish: error: line 10: malformed_json: invalid JSON (column 29, "
                          "at the end): Expecting ',' delimiter (skipped)")
    got = summary(proc)
    assert got["lines"] == 9 and got["acknowledged"] == 4 and got["skipped"] == 5
    assert got["failed"] == 0
    assert got["skipped_reasons"] == {"invalid_schema": 2, "malformed_json": 2,
                                      "non_finite_value": 1}
    for topic in ("reports", "membership"):
        records = asyncio.run(read_to_end(broker.bootstrap, topic))
        assert len(records) == 2
        for rec in records:
            assert rec.key is not None and rec.value is not None
            doc = json.loads(rec.value)
            assert rec.key.decode() == doc["user_id"] and "topic" not in doc
            assert rec.partition == java_partition(doc["user_id"], 3)
        acked = Counter(str(r.partition) for r in records)
        assert got["topics"][topic] == {"partitions": 3, "acknowledged": dict(acked)}


def test_send_refuses_a_missing_topic_without_sending(broker: EmbeddedBroker) -> None:
    proc = pufferfish(["send", "-"], broker_env(broker),
                      stdin=json.dumps(GOOD[1]) + "\n")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("pufferfish: error: topic_reports: topic 'reports' does not exist on "
                           "the broker (`pufferfish run` creates it)\n")


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("command", [["send", "-"], ["tail", "--from-beginning"]])
@pytest.mark.parametrize("server", ["refused", "silent"])
def test_an_unreachable_broker_is_one_line_exit_2_in_bounded_time(
    command: list[str], server: str, request: pytest.FixtureRequest
) -> None:
    port = request.getfixturevalue("silent_port" if server == "silent" else "closed_port")
    started = time.monotonic()
    proc = pufferfish([*command, "--timeout", "2"], plain_env(broker=f"kafka://127.0.0.1:{port}"),
                      stdin=json.dumps(GOOD[1]) + "\n", timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert re.fullmatch(rf"pufferfish: error: broker: [^\n]+ kafka://127\.0\.0\.1:{port}"
                        r": is it running\? [^\n]+\n", proc.stderr), proc.stderr
    assert elapsed < 2 + 15, elapsed  # the --timeout, plus interpreter start on a busy machine


def test_tail_waits_for_its_topics_and_skips_unreadable_records(broker: EmbeddedBroker,
                                                                tmp_path: Path) -> None:
    err_path = tmp_path / "tail.err"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stream_app", "tail", "--from-beginning", "--max", "2"],
            env=broker_env(broker), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=err, text=True)
    try:
        wait_for(lambda: "waiting for topic" in err_path.read_text(), 60, "tail's waiting note")
        asyncio.run(create_topics(broker.bootstrap, {"releases": 1, "priors": 1}))
        release = {"seq": 1, "ts": 5.0, "noisy_sum": 2.5, "theta": 1.0, "epsilon": 1.0,
                   "epsilon_spent": 1.0, "epsilon_remaining": 9.0, "pairs": ["value_change"],
                   "rule": "bound", "charge": 1.0}
        priors = {"seq": 1, "ts": 6.0, "group": "g", "support": [0, 1], "probs": [0.5, 0.5],
                  "epsilon_learn": 0.1, "epsilon_spent": 1.1, "status": "low_mass"}
        asyncio.run(produce_json(broker.bootstrap, "releases", [(None, {"seq": "x"})]))
        asyncio.run(produce_json(broker.bootstrap, "releases", [(None, release)]))
        asyncio.run(produce_json(broker.bootstrap, "priors", [(None, priors)]))
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0
    assert sorted(line.split()[0] for line in out.splitlines()) == ["priors", "release"]
    assert ("release seq=1 tick=- theta=1 noisy_sum=2.5 charge=1 epsilon_spent=1/10 "
            "priors_seq=0") in out
    assert "priors seq=1 tick=- group=g status=low_mass radius=0 " in out
    assert "pufferfish: warning: releases: offset 0: unreadable record skipped" in (
        err_path.read_text())


def test_tail_prints_dead_letters_where_and_why_without_their_bytes(broker: EmbeddedBroker,
                                                                     tmp_path: Path) -> None:
    asyncio.run(create_topics(broker.bootstrap, {"dlq": 1, "releases": 1, "priors": 1}))
    located = {"source_topic": "reports", "raw": '{"user_id": "u7", "value": 2}',
               "reason": "wrong_partition", "ts": 5.0, "partition": 1, "offset": 42,
               "detail": "expected partition 3 of 8"}
    older = {"source_topic": "membership", "raw": "{", "reason": "malformed_json", "ts": 6.0}
    asyncio.run(produce_json(broker.bootstrap, "dlq",
                             [(None, located), (None, {"reason": 3}), (None, older)]))
    release = {"seq": 1, "ts": 7.0, "noisy_sum": 2.5, "theta": 1.0, "epsilon": 1.0,
               "epsilon_spent": 1.0, "epsilon_remaining": 9.0, "pairs": ["value_change"],
               "rule": "bound", "charge": 1.0}
    asyncio.run(produce_json(broker.bootstrap, "releases", [(None, release)]))
    env = plain_env(broker=broker.url, topic_deadletter="dlq")

    human = pufferfish(["tail", "--topics", "deadletter", "--from-beginning", "--max", "2"], env,
                       timeout=60)
    assert human.returncode == 0, human.stderr
    assert human.stdout.splitlines() == [
        'deadletter reason=wrong_partition source_topic=reports partition=1 offset=42 '
        'detail="expected partition 3 of 8"',
        "deadletter reason=malformed_json source_topic=membership partition=- offset=-",
    ]
    assert "u7" not in human.stdout  # the record's bytes are left to --json
    assert human.stderr == "pufferfish: warning: dlq: offset 1: unreadable record skipped\n"

    as_json = pufferfish(["tail", "--topics", "dlq", "--json", "--from-beginning", "--max", "1"],
                         env, timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    assert [json.loads(line) for line in as_json.stdout.splitlines()] == [located]

    # the default is still releases and priors: the dead letters are not among them
    default = pufferfish(["tail", "--from-beginning", "--max", "1"], env, timeout=60)
    assert default.returncode == 0, default.stderr
    assert default.stdout.startswith("release seq=1 ")


def test_broker_flag_overrides_the_settings_for_send_and_tail(broker: EmbeddedBroker,
                                                              closed_port: int) -> None:
    asyncio.run(create_topics(broker.bootstrap, {"reports": 4, "membership": 4,
                                                 "deadletter": 1}))
    env = plain_env(broker=f"kafka://127.0.0.1:{closed_port}")  # nobody there: only --broker
    sent = pufferfish(["send", "--broker", broker.url], env, stdin=json.dumps(GOOD[1]) + "\n",
                      timeout=60)
    assert sent.returncode == 0, sent.stderr
    assert summary(sent)["acknowledged"] == 1
    records = asyncio.run(read_to_end(broker.bootstrap, "membership"))
    assert [json.loads(r.value or b"")["user_id"] for r in records] == ["alice"]

    letter = {"source_topic": "reports", "raw": "{", "reason": "malformed_json", "ts": 5.0}
    asyncio.run(produce_json(broker.bootstrap, "deadletter", [(None, letter)]))
    tailed = pufferfish(["tail", "--broker", broker.url, "--topics", "deadletter",
                         "--from-beginning", "--max", "1"], env, timeout=60)
    assert tailed.returncode == 0, tailed.stderr
    assert tailed.stdout.startswith("deadletter reason=malformed_json source_topic=reports"), \
        tailed.stdout
