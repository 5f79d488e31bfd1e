"""A setting's name mistyped is an error, with the closest name, at every command that reads
the settings (run, plan, send, tail): in an environment variable and in a config file key. One
line on stderr, exit 2, no traceback; nothing else happens (no broker is contacted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import PufferfishInputError
from stream_app.settings.load import check_environment

CONSOLE = Path(sys.executable).with_name("pufferfish")
COMMANDS = {
    "run": ["run"],
    "plan": ["plan"],
    "send": ["send", os.devnull],
    "tail": ["tail", "--max", "1"],
}


def _pufferfish(args: list[str], env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env.update(env_extra)
    # a broker nobody listens on: a command that got past the settings would fail differently
    env.setdefault("PUFFERFISH_BROKER", "kafka://127.0.0.1:1")
    return subprocess.run([str(CONSOLE), *args], capture_output=True, text=True, env=env,
                          timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_environment_typo_is_named_with_its_closest_setting(command: str) -> None:
    done = _pufferfish(COMMANDS[command], {"PUFFERFISH_EPSILION": "2"})
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr == ("pufferfish: error: PUFFERFISH_EPSILION: unknown setting; did you "
                           "mean PUFFERFISH_EPSILON?\n"), done.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_config_file_typo_is_named_with_its_closest_setting(command: str,
                                                              tmp_path: Path) -> None:
    config = tmp_path / "settings.json"
    config.write_text(json.dumps({"epsilon": 1.0, "relase_period_seconds": 5}))
    done = _pufferfish([*COMMANDS[command], "--config", str(config)], {})
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr == ("pufferfish: error: relase_period_seconds: unknown setting; did you "
                           "mean release_period_seconds?\n"), done.stderr


def test_names_that_are_not_settings_pass_and_far_names_get_no_guess() -> None:
    check_environment({"PUFFERFISH_CONFIG_FILE": "x", "PUFFERFISH_CI_RUN": "ci-1",
                       "PUFFERFISH_TEST_WORKERS": "6", "PUFFERFISH_EPSILON": "1",
                       "pufferfish_broker": "kafka://h:1", "OTHER_EPSILION": "1"})
    with pytest.raises(PufferfishInputError) as info:
        check_environment({"PUFFERFISH_ZZZZ": "1"})
    assert (info.value.field, info.value.message) == ("PUFFERFISH_ZZZZ", "unknown setting")
    with pytest.raises(PufferfishInputError) as info:
        check_environment({"PUFFERFISH_RELEASE_EVERY_EVENTS": "5"})
    assert info.value.message.startswith("removed: releases happen on the public clock only")
