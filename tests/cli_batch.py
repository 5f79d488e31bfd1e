"""Many ``pufferfish`` invocations in ONE subprocess: the CLI's entry point (``stream_app.cli
.main``, what the console script calls) run once per job with its own argv, stdin, stdout,
stderr and environment, and its exit status recorded as the shell would see it.

Each new interpreter pays the numpy/scipy/pydantic import (about 1.5 CPU seconds): a module of
60 console-script runs spent most of its time there. One process per module keeps the CLI's
behaviour (arguments, one-line errors, exit codes, no traceback) and leaves the console
script itself to the few tests that run it (tests/test_cli.py, test_spec_from_file_...).

    python -m tests.cli_batch < jobs.json > results.json
jobs: [{"args": [...], "stdin": str | null, "env": {name: value} | null, "cwd": str | null}]
results: [{"code": int, "stdout": str, "stderr": str}]
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Job:
    args: list[str]
    stdin: str | None = None
    env: dict[str, str] | None = None  # the whole environment (None: the batch's own)
    cwd: str | None = None


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


def run_jobs(jobs: Sequence[Job], timeout: float = 600.0) -> list[Outcome]:
    """Every job in one fresh interpreter, in order."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-m", "tests.cli_batch"], input=json.dumps(
        [job.__dict__ for job in jobs]), capture_output=True, text=True, timeout=timeout,
        cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    return [Outcome(**r) for r in json.loads(done.stdout)]


def _one(job: dict[str, Any]) -> dict[str, Any]:
    from stream_app.cli import main

    saved_env, saved_cwd, saved_stdin = dict(os.environ), os.getcwd(), sys.stdin
    out, err = io.StringIO(), io.StringIO()
    try:
        if job.get("env") is not None:
            os.environ.clear()
            os.environ.update(job["env"])
        if job.get("cwd"):
            os.chdir(job["cwd"])
        sys.stdin = io.StringIO(job.get("stdin") or "")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(job["args"])
            except SystemExit as exc:  # argparse, --version
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # what a console script would print: a traceback, exit 1
                traceback.print_exc()
                code = 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.stdin = saved_stdin
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


if __name__ == "__main__":
    results = [_one(job) for job in json.load(sys.stdin)]
    sys.__stdout__.write(json.dumps(results))
