"""The installed ``pufferfish`` console script, run as a user runs it: a subprocess with an
environment free of the test run's ``PUFFERFISH_*`` variables, and the one-line error check."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

CONSOLE_SCRIPT = Path(sys.executable).with_name("pufferfish")
ERROR_LINE = re.compile(r"pufferfish: error: (?P<field>[^:\n]+): (?P<message>[^\n]+)\n")


def user_env(**settings: str) -> dict[str, str]:
    """This process's environment without PUFFERFISH_* variables, plus ``settings``
    (``broker="kafka://…"`` sets PUFFERFISH_BROKER)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env.update({f"PUFFERFISH_{k.upper()}": v for k, v in settings.items()})
    return env


def pufferfish(args: list[str], env: Mapping[str, str] | None = None, stdin: str = "",
               timeout: float = 120.0, cwd: Path | None = None
               ) -> subprocess.CompletedProcess[str]:
    assert CONSOLE_SCRIPT.is_file(), "pip install the project into the test environment"
    return subprocess.run([str(CONSOLE_SCRIPT), *args], env=dict(env or user_env()),
                          input=stdin, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> re.Match[str]:
    """The command failed as every command must: exit 2, nothing on stdout, one line
    ``pufferfish: error: <field>: <message>`` on stderr (no traceback); that line's match."""
    shown = f"exit {proc.returncode}\nstdout: {proc.stdout[-600:]}\nstderr: {proc.stderr[-600:]}"
    assert proc.returncode == 2, shown
    assert proc.stdout == "", shown
    found = ERROR_LINE.fullmatch(proc.stderr)
    assert found is not None, shown
    return found
