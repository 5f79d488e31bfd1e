"""The operator's documents against what they describe.

- README.md, "Run against a local broker": its commands, taken from the README itself, run word
  for word in a fresh clone (the broker's port aside) until `tail` shows releases;
- README.md, "Plan": the excerpt is what `pufferfish plan` prints for examples/local.json;
- docs/operations.md: every setting, every command with each of its flags, every metric.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from stream_app.cli import FORWARDED, main
from stream_app.demo.broker import free_port
from stream_app.faust_adapter.ports_file import reported_port
from stream_app.metrics import METRIC_NAMES
from stream_app.metrics_page import local_url, sample, scrape
from stream_app.settings import Settings
from tests.deploy.support import ROOT
from tests.waiting import wait_for

README = ROOT / "README.md"
OPERATIONS = ROOT / "docs" / "operations.md"
LOCAL_SECTION = "## Run against a local broker"
README_PORT = 9092  # the port the README's commands use; the test asks the OS for another
WALK_TIMEOUT = 240  # bounds a failure only: the walk takes about 30 s


def section(path: Path, heading: str) -> str:
    text = path.read_text(encoding="utf-8")
    assert heading in text, f"{path.relative_to(ROOT)} has no section {heading!r}"
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def local_commands() -> list[str]:
    """The shell commands of the README's local-broker section, comments removed."""
    (block,) = re.findall(r"```bash\n(.*?)```", section(README, LOCAL_SECTION), re.S)
    return [line.split("#", 1)[0].strip() for line in block.splitlines()
            if line.split("#", 1)[0].strip()]


def fresh_clone(dest: Path) -> Path:
    """The repository's tracked files as a clone has them (uncommitted edits included, so the
    README being edited is the one tested): no .venv, no out/, nothing untracked."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                            check=True, timeout=60).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if not src.exists() and not src.is_symlink():  # deleted, not yet committed
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel, follow_symlinks=False)
    return dest


def venv_running_the_clone(clone: Path) -> Path:
    """clone/.venv as `scripts/start-tansu.sh` would leave it, without an install (offline, in
    seconds): a venv whose `python` imports the clone's packages first and the installed
    dependencies of this interpreter after them, and a `pufferfish` console script. It has no
    pip, so a script that tried to install into it would fail."""
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    # .pth files are read in name order: the clone first, then this interpreter's packages
    (site / "00_clone.pth").write_text(f"{clone}\n", encoding="utf-8")
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "zz_dependencies.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in ours), encoding="utf-8")
    console = venv / "bin" / "pufferfish"
    console.write_text(f"#!{python}\nimport sys\nfrom stream_app.cli import main\n"
                       "sys.exit(main())\n", encoding="utf-8")
    console.chmod(0o755)
    where = subprocess.run(
        [str(python), "-I", "-c", "import stream_app; print(stream_app.__file__)"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    assert where.startswith(str(clone)), f"the clone's .venv imports {where}"
    return venv


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def stop_group(pgid: int) -> None:
    """SIGTERM to everything the walk started (bash, tansu, the worker, a tail), SIGKILL to
    what is left after 20 s."""
    for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not group_members(pgid):
            return
    raise AssertionError(f"processes of the walk survived SIGKILL: {group_members(pgid)}")


def test_readme_local_section_is_the_documented_walk() -> None:
    commands = local_commands()
    assert commands[0] == f"bash scripts/start-tansu.sh {README_PORT}"
    assert all(c.startswith(".venv/bin/pufferfish ") for c in commands[1:]), commands
    assert commands[1].endswith(" &"), "the worker runs in the background"
    assert "examples/local.json" in commands[1]
    assert any(" send " in c and c.endswith("examples/events.jsonl") for c in commands)
    assert " tail " in commands[-1]
    config = json.loads((ROOT / "examples" / "local.json").read_text(encoding="utf-8"))
    assert config["broker"] == f"kafka://127.0.0.1:{README_PORT}"
    explained = (ROOT / "examples" / "local.md").read_text(encoding="utf-8")
    missing = [key for key in config if f"| `{key}` |" not in explained]
    assert not missing, f"examples/local.md does not explain {missing}"


@pytest.mark.slow
@pytest.mark.integration
def test_readme_local_broker_walk_on_a_fresh_clone(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "clone")
    venv_running_the_clone(clone)
    port = free_port()  # tansu's: a broker that cannot bind 0 (tests/ports.py)
    ports_file = tmp_path / "worker-ports.json"  # the worker's metrics port: the OS picks it
    script = "\n".join(["set -euo pipefail", *local_commands()]).replace(
        f"start-tansu.sh {README_PORT}", f"start-tansu.sh {port}") + "\n"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHON", "PYTHONPATH", "VIRTUAL_ENV", "PUFFERFISH_CONFIG_FILE")}
    # examples/local.json names 127.0.0.1:9092 and metrics port 9102: the environment wins
    # over the file, so the walk runs on ports of its own
    env.update(PUFFERFISH_BROKER=f"kafka://127.0.0.1:{port}", PUFFERFISH_METRICS_PORT="0",
               PUFFERFISH_PORTS_FILE=str(ports_file), TMPDIR=str(tmp_path))
    out_path, err_path = tmp_path / "walk.out", tmp_path / "walk.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(["bash", "-c", script], cwd=clone, env=env, stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        try:
            status = proc.wait(timeout=WALK_TIMEOUT)
        except subprocess.TimeoutExpired:
            status = None
        stdout = out_path.read_text(errors="replace")
        stderr = err_path.read_text(errors="replace")
        shown = f"\n--- stdout\n{stdout}\n--- stderr\n{stderr[-6000:]}"
        assert status == 0, f"the README's commands ended with {status}{shown}"
        lines = stdout.splitlines()
        pid, started_port = lines[0].split()
        assert int(started_port) == port and int(pid) > 0, shown
        assert "==> installing" not in stderr, f"the .venv was already there{shown}"
        events = (clone / "examples" / "events.jsonl").read_text().splitlines()
        (summary,) = [json.loads(ln) for ln in lines if ln.startswith("{")]
        assert summary["acknowledged"] == len(events) and summary["skipped"] == 0, shown
        releases = [ln for ln in lines if ln.startswith("release seq=")]
        sent_at = next(i for i, ln in enumerate(lines) if ln.startswith("{"))
        after = [ln for ln in lines[sent_at:] if ln.startswith("release seq=")]
        assert len(releases) >= 2 and len(after) >= 1, f"no release in tail's output{shown}"
        # the worker consumed what `send` sent (8 lines: 4 reports, 3 joins and a leave)
        # the worker wrote its ports before `tail` could return a release
        metrics_port = reported_port(ports_file, "metrics", None)
        assert metrics_port is not None, f"no metrics port in {ports_file}{shown}"
        url = local_url(metrics_port)

        def consumed() -> bool:
            got = scrape(url)
            return (sample(got, "pufferfish_events_applied_total", {"kind": "report"}) == 4
                    and sample(got, "pufferfish_events_applied_total",
                               {"kind": "membership"}) == 4)

        def counts() -> str:
            got = scrape(url)
            return "input counters: " + ", ".join(
                f"{name}{dict(labels)}={value:g}" for (name, labels), value in sorted(got.items())
                if name.startswith(("pufferfish_events_", "pufferfish_reports_held"))
                and value) + "\n" + err_path.read_text(errors="replace")[-3000:]

        wait_for(consumed, 60, "the worker to consume examples/events.jsonl", detail=counts)
        assert (clone / "out" / "release-state-releases.json").is_file()  # data_dir: out
    finally:
        stop_group(proc.pid)


def test_readme_plan_excerpt_is_what_plan_prints(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # load_settings sets PUFFERFISH_CONFIG_FILE: monkeypatch removes it again afterwards
    monkeypatch.delenv("PUFFERFISH_CONFIG_FILE", raising=False)
    for key in [k for k in os.environ if k.upper().startswith("PUFFERFISH_")]:
        if key.upper() not in ("PUFFERFISH_CI_RUN", "PUFFERFISH_TEST_WORKERS"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(ROOT)
    assert main(["plan", "--config", "examples/local.json"]) == 0
    printed = capsys.readouterr().out
    (excerpt,) = re.findall(r"```text\n(.*?)```", section(README, "## Plan"), re.S)
    assert excerpt.strip() in printed, f"README.md, Plan: stale excerpt; plan prints:\n{printed}"


def test_operations_lists_every_setting() -> None:
    text = section(OPERATIONS, "## Settings")
    missing = [name for name in Settings.model_fields if f"`{name}`" not in text]
    assert not missing, f"docs/operations.md, Settings: missing {missing}"


def test_operations_lists_every_metric() -> None:
    text = section(OPERATIONS, "## Metrics")
    missing = [name for name in METRIC_NAMES if f"`{name}" not in text]
    assert not missing, f"docs/operations.md, Metrics: missing {missing}"


@pytest.mark.parametrize("command", [*FORWARDED, "calibrate", "audit"])
def test_operations_gives_every_command_with_its_flags(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", capsys.readouterr().out)) - {"--help"}
    rows = [ln for ln in section(OPERATIONS, "## Command line").splitlines()
            if re.match(rf"\| `pufferfish {command}[ `]", ln)]
    assert len(rows) == 1, f"docs/operations.md, Command line: one row for {command}: {rows}"
    usage = re.split(r"(?<!\\)\|", rows[0])[1]  # the first cell (an escaped \| stays in it)
    missing = sorted(f for f in flags if f not in usage)
    assert not missing, f"docs/operations.md, `pufferfish {command}`: flags {missing} missing"
