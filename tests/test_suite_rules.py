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
