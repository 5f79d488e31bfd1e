"""A setting's name mistyped is an error, with the closest name, at every command that reads
the settings (run, plan, send, tail): in an environment variable and in a config file key. One
line on stderr, exit 2, no traceback; nothing else happens (no broker is contacted)."""

from __future__ import annotations

import json
import os

import pytest

from pufferfish_core.errors import PufferfishInputError
from stream_app.settings.load import check_environment, without_settings
from tests.cli_batch import Job, Outcome, run_jobs

# a module-scoped fixture: one worker process runs this module (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("test_typos")

COMMANDS = {
    "run": ["run"],
    "plan": ["plan"],
    "send": ["send", os.devnull],
    "tail": ["tail", "--max", "1"],
}


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    # a broker nobody listens on: a command that got past the settings would fail differently
    return {**env, "PUFFERFISH_BROKER": "kafka://127.0.0.1:1", **extra}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Outcome]:
    """Each command with a mistyped variable, and with a mistyped config key: the CLI's entry
    point in one subprocess (tests/cli_batch.py)."""
    config = tmp_path_factory.mktemp("typos") / "settings.json"
    config.write_text(json.dumps({"epsilon": 1.0, "relase_period_seconds": 5}))
    jobs = {}
    for name, args in COMMANDS.items():
        jobs[name, "env"] = Job(args, env=_env({"PUFFERFISH_EPSILION": "2"}))
        jobs[name, "file"] = Job([*args, "--config", str(config)], env=_env({}))
    return dict(zip(jobs, run_jobs(list(jobs.values())), strict=True))


EXPECTED = {  # where the typo is -> the one line on stderr
    "env": "pufferfish: error: PUFFERFISH_EPSILION: unknown setting; did you mean "
           "PUFFERFISH_EPSILON?\n",
    "file": "pufferfish: error: relase_period_seconds: unknown setting; did you mean "
            "release_period_seconds?\n",
}


@pytest.mark.parametrize("where", sorted(EXPECTED))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_typo_is_named_with_its_closest_setting(
        command: str, where: str, outcomes: dict[tuple[str, str], Outcome]) -> None:
    done = outcomes[command, where]
    assert done.code == 2, (done.stdout, done.stderr)
    assert done.stderr == EXPECTED[where], done.stderr


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
    with pytest.raises(PufferfishInputError) as info:
        check_environment({"PUFFERFISH_MAX_HELD_REPORTS": "10"})
    assert info.value.message.startswith("removed: a bound shared by every user")
    check_environment({"PUFFERFISH_MAX_HELD_REPORTS_PER_USER": "10"})  # the bound that stays


def test_a_started_process_inherits_no_setting_but_the_ci_marker() -> None:
    environ = {"PATH": "/bin", "PUFFERFISH_BROKER": "kafka://b:9092",
               "PUFFERFISH_CONFIG_FILE": "/etc/p.json", "pufferfish_app_id": "x",
               "PUFFERFISH_CI_RUN": "ci-1-2", "PUFFERFISH_TEST_WORKERS": "8"}
    assert without_settings(environ) == {"PATH": "/bin", "PUFFERFISH_CI_RUN": "ci-1-2",
                                         "PUFFERFISH_TEST_WORKERS": "8"}
