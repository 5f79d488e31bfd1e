"""The canary (test_faust_canary.py) fails on an edit of any function it lists.

For each fingerprinted function: its module's source is copied to tmp_path, the function's body
is edited there (a statement inserted; a comparison flipped where it has one), the copy is
imported next to the installed module (same package, so its imports resolve as the original's),
and the canary's own check runs against the function of the copy: it must fail. An unedited copy
passes, so the edit is what the canary sees. The edits an independent review made upstream and
no test noticed (issue 34) are among them: `AIOKafkaConsumerThread.seek` made a no-op,
`Consumer._new_offset`'s ``> 1`` made ``> 2``, `Consumer.ack`'s ``>=`` made ``>``.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.stream_app.faust_adapter.test_faust_canary import (
    FINGERPRINTS,
    check_fingerprint,
    resolve,
)

Edit = Callable[[list[str]], list[str]]  # the function's source lines -> edited lines


def body_start(lines: list[str]) -> tuple[int, str]:
    """Index in `lines` of the first statement of the function's (or class's) body, and its
    indentation."""
    indent = len(lines[0]) - len(lines[0].lstrip())
    tree = ast.parse("".join(line[indent:] if line.strip() else "\n" for line in lines))
    first = tree.body[0].body[0]  # type: ignore[attr-defined]
    assert first.lineno > tree.body[0].lineno, "a one-line definition"
    line = lines[first.lineno - 1]
    return first.lineno - 1, line[:len(line) - len(line.lstrip())]


def insert_statement(lines: list[str]) -> list[str]:
    at, indent = body_start(lines)
    return [*lines[:at], f"{indent}_canary_edit = None\n", *lines[at:]]


def make_no_op(lines: list[str]) -> list[str]:
    at, indent = body_start(lines)
    return [*lines[:at], f"{indent}return None\n"]


FLIPPED = {ast.Gt: ">=", ast.GtE: ">", ast.Lt: "<=", ast.LtE: "<", ast.Eq: "!=",
           ast.NotEq: "==", ast.Is: "is not", ast.IsNot: "is", ast.In: "not in",
           ast.NotIn: "in"}


def first_comparison(lines: list[str]) -> tuple[int, int, int, str] | None:
    """(line index, start and end column of the operator, flipped operator) of the function's
    first comparison whose operator sits on one line, or None."""
    indent = len(lines[0]) - len(lines[0].lstrip())
    tree = ast.parse("".join(line[indent:] if line.strip() else "\n" for line in lines))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Compare) and node.left.end_lineno == node.lineno
                and node.comparators[0].lineno == node.lineno):
            assert node.left.end_col_offset is not None
            return (node.lineno - 1, indent + node.left.end_col_offset,
                    indent + node.comparators[0].col_offset, FLIPPED[type(node.ops[0])])
    return None


def flip_comparison(lines: list[str]) -> list[str]:
    found = first_comparison(lines)
    assert found is not None
    row, start, end, flipped = found
    line = lines[row]
    return [*lines[:row], f"{line[:start]} {flipped} {line[end:]}", *lines[row + 1:]]


def replace_once(old: str, new: str) -> Edit:
    def edit(lines: list[str]) -> list[str]:
        text = "".join(lines)
        assert text.count(old) == 1, f"{old!r} found {text.count(old)} times"
        return text.replace(old, new).splitlines(keepends=True)
    return edit


def edited_module(name: str, edit: Edit | None, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A copy of the module defining `name`, with `edit` applied to that function's source,
    imported as a sibling of the installed module."""
    obj = resolve(name)
    module = sys.modules[name.partition(":")[0]]
    source = Path(inspect.getsourcefile(module) or "").read_text().splitlines(keepends=True)
    lines, start = inspect.getsourcelines(obj)
    edited = edit(lines) if edit is not None else lines
    assert edit is None or edited != lines
    source[start - 1:start - 1 + len(lines)] = edited
    package, _, leaf = module.__name__.rpartition(".")
    copy_name = f"{package}._canary_copy_{leaf}"
    path = tmp_path / f"_canary_copy_{leaf}.py"
    path.write_text("".join(source))
    spec = importlib.util.spec_from_file_location(copy_name, path)
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, copy_name, copy)
    spec.loader.exec_module(copy)
    return copy


def canary_fails(name: str, copy: ModuleType) -> bool:
    try:
        check_fingerprint(name, copy)
    except AssertionError:
        return True
    return False


COMPARING = sorted(n for n in FINGERPRINTS if first_comparison(inspect.getsourcelines(
    resolve(n))[0]) is not None)


def test_an_unedited_copy_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy itself changes nothing the canary sees (so an edit is what fails it below)."""
    passing = {name for name in FINGERPRINTS
               if not canary_fails(name, edited_module(name, None, tmp_path, monkeypatch))}
    assert passing == set(FINGERPRINTS)


@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_a_statement_inserted_fails_the_canary(name: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert canary_fails(name, edited_module(name, insert_statement, tmp_path, monkeypatch))


@pytest.mark.parametrize("name", COMPARING)
def test_a_comparison_flipped_fails_the_canary(name: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert canary_fails(name, edited_module(name, flip_comparison, tmp_path, monkeypatch))


AIOKAFKA_DRIVER = "faust.transport.drivers.aiokafka"
CONSUMER = "faust.transport.consumer"


@pytest.mark.parametrize(("name", "edit"), [
    (f"{AIOKAFKA_DRIVER}:AIOKafkaConsumerThread.seek", make_no_op),
    (f"{CONSUMER}:Consumer._new_offset", replace_once("- committed_offset > 1:",
                                                      "- committed_offset > 2:")),
    (f"{CONSUMER}:Consumer.ack", replace_once("offset >= committed", "offset > committed")),
], ids=["seek-no-op", "new-offset-guard", "ack-comparison"])
def test_the_edits_the_review_made_fail_the_canary(name: str, edit: Edit, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert canary_fails(name, edited_module(name, edit, tmp_path, monkeypatch))
