"""The parallel-suite rules of tests/conftest.py that can be read from the source."""

from __future__ import annotations

import ast
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
