"""Running ``pufferfish send`` / ``pufferfish tail`` as subprocesses, and the partition oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiokafka.partitioner import murmur2

from stream_app.demo.broker import EmbeddedBroker

REPO = Path(__file__).resolve().parents[3]


def java_partition(key: str, partitions: int) -> int:
    """The contract's partition from aiokafka's murmur2 (not the code under test)."""
    return int(murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def plain_env(**settings: str) -> dict[str, str]:
    """This process's environment without PUFFERFISH_* variables, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env["PYTHONPATH"] = str(REPO)
    env.update({f"PUFFERFISH_{k.upper()}": v for k, v in settings.items()})
    return env


def broker_env(broker: EmbeddedBroker) -> dict[str, str]:
    return plain_env(broker=broker.url)


def pufferfish(args: list[str], env: Mapping[str, str], stdin: str | None = None,
               timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stream_app", *args], env=dict(env),
                          input=stdin if stdin is not None else "", capture_output=True,
                          text=True, timeout=timeout)


def summary(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one JSON summary line ``send`` prints on stdout."""
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout + proc.stderr
    return dict(json.loads(lines[0]))


def jsonl(docs: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(d) + "\n" for d in docs)
