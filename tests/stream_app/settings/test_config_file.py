"""Every way of naming a config file (``--config``, ``PUFFERFISH_CONFIG_FILE``) fails the same
way when the file is missing or unreadable, at every command that reads the settings: one line
``pufferfish: error: config: …`` naming the file and what named it, exit 2, nothing else done
(the broker below listens nowhere: a command that got past its settings would fail
differently). Before, a missing PUFFERFISH_CONFIG_FILE was ignored: the defaults, without a
word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pufferfish_core.errors import PufferfishInputError
from tests.installed_cli import one_line_error, pufferfish, user_env

COMMANDS = {
    "run": ["run", "--timeout", "5"],
    "plan": ["plan"],
    "send": ["send", "-"],
    "tail": ["tail", "--max", "1", "--timeout", "5"],
}
NOWHERE = "kafka://127.0.0.1:1"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_missing_config_file_is_one_line_exit_2_whoever_names_it(
        command: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    by_env = pufferfish(COMMANDS[command],
                        user_env(broker=NOWHERE, config_file=str(missing)), timeout=60)
    by_flag = pufferfish([*COMMANDS[command], "--config", str(missing)],
                         user_env(broker=NOWHERE), timeout=60)
    for proc, named_by in ((by_env, "PUFFERFISH_CONFIG_FILE"), (by_flag, "--config")):
        error = one_line_error(proc)
        assert error["field"] == "config", proc.stderr
        assert error["message"] == f"no such file: {missing} (from {named_by})", proc.stderr


@pytest.mark.parametrize("content, message", [
    (None, "is a directory"),
    (b"\xff{}", "not UTF-8 text (byte 0)"),
    (b'{"epsilon": 2,', "not valid JSON (Expecting property name enclosed in double quotes, "
                        "line 1)"),
    (b"[1]", "must hold one JSON object of settings, not list"),
], ids=["directory", "latin1", "truncated", "array"])
def test_an_unreadable_config_file_is_one_line_exit_2(
        content: bytes | None, message: str, tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    error = one_line_error(pufferfish(["plan"], user_env(config_file=str(path)), timeout=60))
    assert (error["field"], error["message"]) == (
        "config", f"{message}: {path} (from PUFFERFISH_CONFIG_FILE)")


def test_a_config_file_named_by_the_environment_is_read(tmp_path: Path) -> None:
    """Control: the file is not refused for being named by the environment."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"epsilon": 2.0, "budget_total": 7.0}))
    proc = pufferfish(["plan", "--json"], user_env(config_file=str(path)), timeout=60)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert (plan["epsilon"], plan["budget_total"]) == (2.0, 7.0)


def test_an_unreadable_file_says_why(tmp_path: Path) -> None:
    """A read error other than the kinds above (here EACCES, which root never meets on a
    file: a path through a file, ENOTDIR) keeps the system's reason."""
    from stream_app.settings.load import check_config_file

    (tmp_path / "plain").write_text("{}")
    with pytest.raises(PufferfishInputError, match=r"^config: cannot read .*plain/x\.json "
                       r"\(from --config\): Not a directory$"):
        check_config_file(str(tmp_path / "plain" / "x.json"), "--config")
