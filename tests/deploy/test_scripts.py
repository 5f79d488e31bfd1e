"""scripts/test.sh, scripts/demo.sh and .ci/run: syntax, the README's two commands, and the
control flow of the scripts (run in a scratch copy with stand-in tools, so no real install)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.deploy.support import ROOT
from tests.waiting import wait_for

SCRIPTS = [ROOT / "scripts" / "test.sh", ROOT / "scripts" / "demo.sh", ROOT / ".ci" / "run"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_script_is_valid_bash(script: Path) -> None:
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_readme_gives_exactly_the_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]


def test_ci_runs_the_readme_command_verbatim() -> None:
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert lines.count("bash scripts/test.sh") == 1


def _write_exe(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _scratch_repo(tmp_path: Path, pytest_status: int, ruff_status: int = 0,
                  mypy_status: int = 0) -> Path:
    """A copy of scripts/test.sh with a .venv whose python/ruff/mypy only record their calls."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test.sh", repo / "scripts" / "test.sh")
    (repo / "core").mkdir()
    (repo / "core" / "__init__.py").write_text("")
    calls = repo / "calls.log"
    _write_exe(repo / ".venv" / "bin" / "python", f"""#!/usr/bin/env bash
echo "python $*" >> {calls}
if [ "$1 $2" = "-m pytest" ]; then exit {pytest_status}; fi
exit 0
""")
    for tool, status in (("ruff", ruff_status), ("mypy", mypy_status)):
        _write_exe(
            repo / ".venv" / "bin" / tool,
            f'#!/usr/bin/env bash\necho "{tool} $*" >> {calls}\nexit {status}\n',
        )
    return repo


def _run_test_sh(repo: Path) -> subprocess.CompletedProcess[str]:
    # prometheus/promtool on PATH (stand-ins) so the script does not call apt-get here.
    bin_dir = repo / "fakebin"
    for tool in ("prometheus", "promtool"):
        _write_exe(bin_dir / tool, "#!/bin/sh\nexit 0\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "scripts/test.sh"], cwd=repo, env=env, capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL,
    )


def test_test_sh_runs_ruff_then_mypy_beside_pytest(tmp_path: Path) -> None:
    repo = _scratch_repo(tmp_path, pytest_status=0)
    result = _run_test_sh(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    calls = (repo / "calls.log").read_text().splitlines()
    # mypy runs in the background while pytest runs: their order in the log is either
    assert calls[-3] == "ruff check ."
    assert sorted(calls[-2:]) == ["mypy core", "python -m pytest -q -n 6 --dist loadgroup"]
    assert 'python -m pip install --quiet -e .[dev]' in calls
    assert result.stdout.index("==> mypy core (in the background") \
        < result.stdout.index("==> python -m pytest") < result.stdout.rindex("==> mypy core")


def test_test_sh_fails_when_mypy_fails_even_if_the_tests_pass(tmp_path: Path) -> None:
    result = _run_test_sh(_scratch_repo(tmp_path, pytest_status=0, mypy_status=1))
    assert result.returncode == 1
    assert "mypy failed" in result.stderr


def test_test_sh_treats_no_tests_as_failure(tmp_path: Path) -> None:
    result = _run_test_sh(_scratch_repo(tmp_path, pytest_status=5))
    assert result.returncode == 1
    assert "no tests" in result.stderr


def test_test_sh_passes_pytest_failures_through(tmp_path: Path) -> None:
    assert _run_test_sh(_scratch_repo(tmp_path, pytest_status=1)).returncode == 1


def test_test_sh_stops_at_a_lint_failure(tmp_path: Path) -> None:
    repo = _scratch_repo(tmp_path, pytest_status=0, ruff_status=1)
    assert _run_test_sh(repo).returncode != 0
    assert not any(c.startswith("mypy") for c in (repo / "calls.log").read_text().splitlines())


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may stay a zombie until init reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_ci_run_stops_what_the_tests_left_running(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    pid_file = repo / "leftover.pid"
    # A "test" that leaves a process behind in its own session (as a broker would) and fails.
    _write_exe(repo / "scripts" / "test.sh", f"""#!/usr/bin/env bash
setsid sleep 300 </dev/null >/dev/null 2>&1 &
echo $! > {pid_file}
exit 3
""")
    result = subprocess.run(
        ["bash", ".ci/run"], cwd=repo, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL, env={**os.environ, "CI": "true"},
    )
    assert result.returncode == 3, result.stdout + result.stderr
    pid = int(pid_file.read_text())
    try:
        wait_for(lambda: not _running(pid), 30, f"the leftover process {pid} to end", 0.1)
    except AssertionError as exc:
        os.kill(pid, 9)
        raise AssertionError(f"the leftover process survived .ci/run: {exc}") from None
    assert "stopping leftover processes" in result.stderr
