"""The commands that deploy/ runs (Dockerfile, compose, k8s) are real `pufferfish` subcommands."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.deploy.support import COMPOSE_FILE, DOCKERFILE, K8S, ROOT, load_yaml, load_yaml_documents

CONSOLE_SCRIPT = Path(sys.executable).parent / "pufferfish"


def _dockerfile_instruction(name: str) -> list[str]:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    matches = re.findall(rf"^{name}\s+(.+)$", text, re.M)
    assert len(matches) == 1, f"expected one {name} in the Dockerfile"
    value = matches[0].strip()
    return json.loads(value) if value.startswith("[") else shlex.split(value)


def _argv_of_deployments() -> dict[str, list[str]]:
    """Where -> full argv of the pufferfish process it starts."""
    entrypoint = _dockerfile_instruction("ENTRYPOINT")
    argvs = {"Dockerfile": entrypoint + _dockerfile_instruction("CMD")}
    worker = load_yaml(COMPOSE_FILE)["services"]["worker"]
    argvs["docker-compose worker"] = entrypoint + worker["command"]
    for path in sorted(K8S.glob("*.yaml")):
        for doc in load_yaml_documents(path):
            if doc["kind"] in ("StatefulSet", "Deployment"):
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    argvs[f"k8s {path.name} {c['name']}"] = c["command"] + c.get("args", [])
    return argvs


def _help(subcommand: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), subcommand, "--help"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )


def test_console_script_is_declared_and_installed() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["scripts"]["pufferfish"] == "stream_app.cli:main"
    assert CONSOLE_SCRIPT.is_file(), "pip install the project into the test environment"


@pytest.mark.parametrize("where", sorted(_argv_of_deployments()))
def test_deployed_command_is_a_real_subcommand_with_real_flags(where: str) -> None:
    argv = _argv_of_deployments()[where]
    assert argv[0] == "pufferfish", where
    subcommand, *rest = argv[1:]
    result = _help(subcommand)
    assert result.returncode == 0, (
        f"{where}: `pufferfish {subcommand} --help` failed:\n{result.stderr}")
    assert "usage" in result.stdout.lower()
    for flag in (a.split("=", 1)[0] for a in rest if a.startswith("-")):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", result.stdout), (where, flag)


def test_help_check_fails_for_a_made_up_subcommand() -> None:
    assert _help("no-such-subcommand").returncode != 0
