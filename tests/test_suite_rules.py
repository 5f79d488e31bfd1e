"""The parallel-suite rules of tests/conftest.py that can be read from the source."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
WIDE_SCOPES = {"module", "package", "session", "class"}


def _fixture_scope(decorator: ast.expr) -> str | None:
    """The scope of a `@pytest.fixture(scope=...)` decorator (None for anything else)."""
    if not isinstance(decorator, ast.Call):
        return None
    name = ast.unparse(decorator.func)
    if name not in ("pytest.fixture", "fixture"):
        return None
    for kw in decorator.keywords:
        if kw.arg == "scope" and isinstance(kw.value, ast.Constant):
            return str(kw.value.value)
    return "function"


def wide_fixtures(tree: ast.Module) -> list[str]:
    """Fixtures of the module whose scope is wider than one test."""
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(_fixture_scope(d) in WIDE_SCOPES for d in node.decorator_list)
    ]


def declares_xdist_group(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return "xdist_group" in ast.unparse(node.value)
    return False


def _test_modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


@pytest.mark.parametrize("path", _test_modules(), ids=lambda p: str(p.relative_to(TESTS)))
def test_module_scoped_fixtures_run_once_per_module(path: Path) -> None:
    tree = ast.parse(path.read_text())
    shared = wide_fixtures(tree)
    assert not shared or declares_xdist_group(tree), (
        f"{path.name} shares {shared} between its tests but declares no "
        "pytestmark = pytest.mark.xdist_group(...): every xdist worker would compute it again "
        "(tests/conftest.py)"
    )


def test_the_rule_sees_a_module_fixture_without_a_group() -> None:
    bad = ast.parse(
        "import pytest\n@pytest.fixture(scope='module')\ndef f(): ...\n"
        "pytestmark = pytest.mark.integration\n"
    )
    good = ast.parse(
        "import pytest\n@pytest.fixture(scope='session')\ndef f(): ...\n"
        "pytestmark = [pytest.mark.xdist_group('m')]\n"
    )
    plain = ast.parse("import pytest\n@pytest.fixture\ndef f(): ...\n")
    assert wide_fixtures(bad) == ["f"] and not declares_xdist_group(bad)
    assert wide_fixtures(good) == ["f"] and declares_xdist_group(good)
    assert wide_fixtures(plain) == []


GROUPED_SUITE = '''
import os
from pathlib import Path

import pytest

OUT = Path(__file__).parent / "workers"


def _record(name):
    OUT.mkdir(exist_ok=True)
    (OUT / name).write_text(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.xdist_group("g")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    _record(f"grouped{i}")


@pytest.mark.parametrize("i", range(6))
def test_free(i):
    _record(f"free{i}")
'''


def test_xdist_keeps_a_group_on_one_process(tmp_path: Path) -> None:
    """The grouping above is only as good as pytest-xdist's loadgroup on the pytest installed
    (pytest 9.2 silently ignores the group suffix xdist 3.8 adds: every group was split)."""
    (tmp_path / "test_grouped.py").write_text(GROUPED_SUITE)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = {p.name: p.read_text() for p in (tmp_path / "workers").iterdir()}
    assert len(workers) == 12
    assert len({w for name, w in workers.items() if name.startswith("grouped")}) == 1, workers
    assert {w for name, w in workers.items() if name.startswith("free")} <= {"gw0", "gw1"}


# --- ports: none chosen, released, then bound (tests/README.md, "Ports from the OS") --------

ROOT = TESTS.parent
PORT_RULE_DIRS = ("stream_app", "bench", "tests", "deploy", "scripts", "pufferfish_data",
                  "pufferfish_paper")
# Where free_port() may be used, and why: only brokers that must be told their port (they
# advertise it, and cannot bind 0 and say which port they got). Everything else binds port 0
# and reports the port it got (a worker: its ports file; Prometheus: its log), or holds a
# port bound without listening where nothing may answer (tests/ports.py closed_port).
FREE_PORT_ALLOWED = {
    "stream_app/demo/broker.py": "tansu (EmbeddedBroker): retried on another port when the "
                                 "chosen one is taken before tansu binds it",
    "tests/noida_broker.py": "noida-db: retried the same way on its first start",
    "tests/stream_app/demo/test_broker.py": "the tests of free_port and of tansu's retry",
    "tests/deploy/test_operator_docs.py": "the README's walk starts tansu on a port it is "
                                          "given (scripts/start-tansu.sh PORT)",
    "scripts/start-tansu.sh": "tansu for a developer: port 0 asks free_port() for one",
}


def free_port_uses(source: str) -> list[int]:
    """Lines of a Python module that use free_port: a call, a reference or an import of the
    name, or a definition of a function of that name (a string that names it is no use)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name | ast.Attribute | ast.alias | ast.FunctionDef):
            name = {ast.Name: "id", ast.Attribute: "attr", ast.alias: "name",
                    ast.FunctionDef: "name"}[type(node)]
            if getattr(node, name) == "free_port":
                lines.append(node.lineno)
    return sorted(set(lines))


def _port_rule_files() -> list[Path]:
    files = [p for d in PORT_RULE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    return files + sorted((ROOT / "scripts").glob("*.sh"))


def _uses_free_port(path: Path) -> list[int]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".sh":  # Python run from the script: the name is enough
        return [n for n, line in enumerate(text.splitlines(), 1) if "free_port" in line]
    return free_port_uses(text)


def test_no_port_is_chosen_then_bound_outside_the_brokers_that_must_be_told_theirs() -> None:
    used = {str(p.relative_to(ROOT)): lines for p in _port_rule_files()
            if (lines := _uses_free_port(p))}
    outside = {path: lines for path, lines in used.items() if path not in FREE_PORT_ALLOWED}
    assert not outside, (
        f"free_port() used at {outside}: a port chosen, released and bound later can be taken "
        "in between by a parallel test. Bind port 0 and read back the port the server got "
        "(a worker: its ports_file; tests/ports.py), or hold one bound without listening "
        "(the closed_port fixture); only a broker that must be told its port may use it "
        "(FREE_PORT_ALLOWED, with the reason)")
    unused = set(FREE_PORT_ALLOWED) - set(used)
    assert not unused, f"FREE_PORT_ALLOWED names files that no longer use free_port: {unused}"


def test_the_port_rule_sees_every_kind_of_use() -> None:
    assert free_port_uses("from stream_app.demo.broker import free_port\nport = free_port()\n"
                          ) == [1, 2]
    assert free_port_uses("import stream_app.demo.broker as b\nport = b.free_port()\n") == [2]
    assert free_port_uses("def free_port():\n    return 0\n") == [1]
    assert free_port_uses("pick = getattr(b, 'free_port')\nport = 0\n") == []
    assert free_port_uses("import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\n") == []
