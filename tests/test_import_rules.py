"""The structure the docs promise, read from the code: docs/design.md's "Layout" table is the
import rule of each room; no import circle; no private name imported from another module; no
stream_app module over 250 lines and at most 10 modules at stream_app's root.

Imports are read with ``ast`` from every module of the project's packages, at module level and
inside functions (an import inside a function still ties two modules together). The checks are
plain functions of (modules, imports): the ``*_are_reported`` tests feed them a broken graph and
expect the break to be named, so a check that cannot fail fails there.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
PACKAGES = ("core", "stream_app", "pufferfish_data", "pufferfish_paper", "bench", "deploy/grafana")
# core/ is imported as pufferfish_core (the installed name; a symlink in the checkout): the
# Layout table and these checks name it by its folder, core
IMPORT_NAME_OF_CORE = "pufferfish_core"
PROJECT_TOPS = {"core", IMPORT_NAME_OF_CORE, "stream_app", "pufferfish_data", "pufferfish_paper",
                "bench", "deploy", "tests"}
MAX_LINES = 250
MAX_ROOT_MODULES = 10


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (a project module)
    name: str | None  # the name taken from it (``from target import name``)
    line: int


@dataclass(frozen=True)
class Rule:
    room: str  # a module or package prefix, dotted ("stream_app.domain")
    allowed: tuple[str, ...] | None  # None: anything


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def by_folder(module: str) -> str:
    """A module's name with core's import name replaced by its folder's (the Layout's name)."""
    top, dot, rest = module.partition(".")
    return f"core{dot}{rest}" if top == IMPORT_NAME_OF_CORE else module


def imports_of_core_by_folder_name(modules: Mapping[str, Path]) -> list[str]:
    """``import core`` / ``from core...``: works in a checkout, not in an installed wheel."""
    found = []
    for source, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{source}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] == "core"]
    return found


def read_imports(modules: Mapping[str, Path]) -> list[Import]:
    found: list[Import] = []
    for source, path in modules.items():
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [Import(source, by_folder(a.name), None, node.lineno) for a in node.names
                          if a.name.split(".")[0] in PROJECT_TOPS]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolved against the importing package
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                if base.split(".")[0] not in PROJECT_TOPS:
                    continue
                base = by_folder(base)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    if sub in modules:  # ``from package import module``
                        found.append(Import(source, sub, None, node.lineno))
                    else:
                        found.append(Import(source, base, a.name, node.lineno))
    return found


def design_rules(text: str) -> list[Rule]:
    """The rows of the "Layout" table: (room, may import)."""
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rules = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        room = cells[0].strip("`").removesuffix("/").removesuffix(".py").replace("/", ".")
        may = cells[2]
        allowed = None if may == "anything" else tuple(re.findall(r"`([\w.]+)`", may))
        rules.append(Rule(room, allowed))
    return rules


def within(module: str, prefix: str) -> bool:
    """``module`` is ``prefix`` or inside it; a package's ``__init__`` row is the package's
    face only (``stream_app.__init__`` is ``stream_app`` itself, not its subpackages)."""
    if prefix.endswith(".__init__"):
        return module == prefix.removesuffix(".__init__")
    return module == prefix or module.startswith(prefix + ".")


def rule_of(module: str, rules: Iterable[Rule]) -> Rule | None:
    matching = [r for r in rules if within(module, r.room)]
    return max(matching, key=lambda r: len(r.room)) if matching else None


def rule_breaks(imports: Iterable[Import], rules: list[Rule]) -> list[str]:
    out = []
    for imp in imports:
        rule = rule_of(imp.source, rules)
        if rule is None:
            out.append(f"{imp.source}: no row of the Layout table")
            continue
        if rule.allowed is None or within(imp.target, rule.room) \
                or any(within(imp.target, a) for a in rule.allowed):
            continue
        out.append(f"{imp.source}:{imp.line} imports {imp.target} ({rule.room} may import "
                   f"{', '.join(rule.allowed) or 'nothing of the project'})")
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(imports: Iterable[Import]) -> list[str]:
    """Private names taken from another module, and private modules imported from outside
    their package."""
    found = [f"{i.source}:{i.line} takes {i.name} from {i.target}" for i in imports
             if i.name is not None and _private(i.name) and i.target != i.source]
    found += [f"{i.source}:{i.line} imports the private module {i.target}" for i in imports
              if i.name is None and _private(i.target.rpartition(".")[2])
              and not within(i.source, i.target.rpartition(".")[0])]
    return found


def circles(modules: Iterable[str], imports: Iterable[Import]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        if imp.target in graph and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


MODULES = project_modules()
IMPORTS = read_imports(MODULES)
RULES = design_rules(DESIGN.read_text(encoding="utf-8"))


def test_every_import_is_allowed_by_the_layout_table() -> None:
    assert RULES, "docs/design.md has no Layout table"
    breaks = rule_breaks(IMPORTS, RULES)
    assert not breaks, "\n".join(breaks)


def test_every_room_of_the_table_exists() -> None:
    rooms = [r.room for r in RULES if r.room != "tests"]
    missing = [r for r in rooms if not any(within(m, r) for m in MODULES)
               and not (ROOT / r.replace(".", "/")).exists()]
    assert not missing, missing


@pytest.mark.parametrize("package", ["core", "stream_app"])
def test_no_import_circle(package: str) -> None:
    mods = [m for m in MODULES if within(m, package)]
    found = circles(mods, [i for i in IMPORTS if within(i.source, package)])
    assert not found, found


def test_core_is_imported_by_its_installed_name() -> None:
    tests = {str(p.relative_to(ROOT)): p for p in sorted((ROOT / "tests").rglob("*.py"))}
    found = imports_of_core_by_folder_name({**project_modules(), **tests})
    assert not found, "\n".join(found)


def test_an_import_of_core_by_its_folder_name_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom core.noise import x\nimport core.plan\n")
    good = tmp_path / "good.py"
    good.write_text("from pufferfish_core.noise import x\n")
    found = imports_of_core_by_folder_name({"bad": bad, "good": good})
    assert found == ["bad:2 imports core.noise", "bad:3 imports core.plan"]


def test_no_private_name_is_imported_from_another_module() -> None:
    found = private_imports(IMPORTS)
    assert not found, "\n".join(found)


def test_stream_app_modules_are_small_and_its_root_is_short() -> None:
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines())
             for m, p in MODULES.items() if within(m, "stream_app")}
    big = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert not big, big
    root = [p.name for p in (ROOT / "stream_app").glob("*.py")]
    assert len(root) <= MAX_ROOT_MODULES, root


# --- the checks fail when a rule is broken ------------------------------------------------
def test_a_forbidden_import_is_reported() -> None:
    broken = [*IMPORTS, Import("core.noise", "stream_app.settings", "Settings", 1),
              Import("stream_app.domain.state", "stream_app.faust_adapter.worker", None, 2)]
    breaks = rule_breaks(broken, RULES)
    assert any(b.startswith("core.noise:1 imports stream_app.settings") for b in breaks), breaks
    assert any(b.startswith("stream_app.domain.state:2 imports stream_app.faust_adapter")
               for b in breaks), breaks


def test_a_circle_and_a_private_name_are_reported() -> None:
    broken = [Import("core.a", "core.b", "x", 1), Import("core.b", "core.c", None, 1),
              Import("core.c", "core.a", "_helper", 3), Import("stream_app.x", "core._y", None, 4),
              Import("core.d", "core._y", None, 5)]
    assert circles(["core.a", "core.b", "core.c", "core.d"], broken) == [
        ["core.a", "core.b", "core.c"]]
    assert private_imports(broken) == ["core.c:3 takes _helper from core.a",
                                       "stream_app.x:4 imports the private module core._y"]


def test_the_table_is_read_as_written() -> None:
    rules = design_rules("## Layout\n| path | what | may import |\n|---|---|---|\n"
                         "| `a/b/` | x | `core`, `a.c` |\n| `a/d.py` | y | — |\n"
                         "| `t/` | z | anything |\n## Next\n| `e/` | no | `x` |\n")
    assert rules == [Rule("a.b", ("core", "a.c")), Rule("a.d", ()), Rule("t", None)]
    assert rule_of("a.b.c", rules) == rules[0] and rule_of("e.f", rules) is None
