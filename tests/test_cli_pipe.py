"""A closed pipe (``pufferfish plan | head -c 100``) ends a command quietly: no error line, no
traceback, exit status 141 (128 + SIGPIPE: what the shell reports for any Unix tool the closed
pipe stopped; docs/operations.md). The installed command, its stdout's reader gone before it
writes (closed at once: the command is still importing), so the outcome does not hang on a race.
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics
from tests.installed_cli import CONSOLE_SCRIPT, user_env
from tests.kafka_helpers import produce_json

EXIT_CLOSED_PIPE = 141
SPEC = {"pair": "value_change", "a": 0, "b": 1}


def _with_stdout_closed(args: list[str], env: dict[str, str] | None = None,
                        stdin: str = "") -> tuple[int, str]:
    proc = subprocess.Popen([str(CONSOLE_SCRIPT), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or user_env())
    assert proc.stdout is not None
    proc.stdout.close()  # the reader has gone before the command wrote anything
    _, err = proc.communicate(stdin, timeout=120)
    return proc.returncode, err


@pytest.mark.parametrize("args, stdin", [
    (["plan"], ""),
    (["plan", "--json"], ""),
    (["calibrate", "--epsilon", "1", "--spec", "-"], json.dumps(SPEC)),
    (["plan", "--help"], ""),
    (["--help"], ""),
], ids=["plan", "plan-json", "calibrate", "plan-help", "help"])
def test_a_closed_pipe_ends_quietly(args: list[str], stdin: str) -> None:
    code, err = _with_stdout_closed(args, stdin=stdin)
    assert (code, err) == (EXIT_CLOSED_PIPE, "")


def test_plan_into_head_prints_its_start_and_no_error() -> None:
    """As a user types it: whether head left before plan's last write is a race (exit 0 or
    141, as for any Unix tool); the output's start and a quiet stderr are not."""
    done = subprocess.run(["bash", "-c", f'set -o pipefail; "{CONSOLE_SCRIPT}" plan | head -c 100'],
                          capture_output=True, text=True, timeout=120, env=user_env())
    assert done.returncode in (0, EXIT_CLOSED_PIPE), done.stderr
    assert done.stderr == "" and len(done.stdout) == 100 and done.stdout.startswith("group")


@pytest.mark.integration
def test_tail_into_a_closed_pipe_ends_quietly(broker: EmbeddedBroker) -> None:
    asyncio.run(create_topics(broker.bootstrap, {"priors": 1}))
    record = {"seq": 1, "ts": 6.0, "group": "g", "support": [0, 1], "probs": [0.5, 0.5],
              "epsilon_learn": 0.1, "epsilon_spent": 1.1, "status": "low_mass"}
    asyncio.run(produce_json(broker.bootstrap, "priors", [(None, record)]))
    code, err = _with_stdout_closed(["tail", "--from-beginning", "--topics", "priors",
                                     "--max", "1"], env=user_env(broker=broker.url))
    assert (code, err) == (EXIT_CLOSED_PIPE, "")
