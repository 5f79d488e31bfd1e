"""Shared by the benchmarks: command-line options, tables, machine info, the RESULTS.md writer.

Every benchmark reports ratios against a baseline measured in the same run (the machine is
shared and noisy), prints its table, and replaces its own section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]  # the project root: PYTHONPATH of subprocesses
RESULTS_PATH = REPO / "bench" / "RESULTS.md"
RESULTS_TITLE = "# Benchmark results\n\nRegenerate a section with the command shown in it.\n"

Row = Sequence[object]


def parser(name: str, description: str) -> argparse.ArgumentParser:
    """Options every benchmark takes: ``--quick`` (smoke sizes) and where to write results."""
    p = argparse.ArgumentParser(prog=f"python -m bench {name}", description=description)
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds): a smoke run")
    p.add_argument("--results", type=Path, default=RESULTS_PATH, help="markdown file to update")
    p.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    return p


def command_line(name: str, argv: Sequence[str] | None) -> str:
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["python -m bench", name, *map(shlex.quote, args)])


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.processor() or "unknown"
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return m.group(1).strip() if m else (platform.processor() or "unknown")


def machine() -> str:
    return (
        f"nproc {os.cpu_count()}, {cpu_model()}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def fmt(value: object) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "n/a"
        if value == 0:
            return "0"
        if abs(value) >= 1e5 or abs(value) < 1e-3:
            return f"{value:.3g}"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    return str(value)


def text_table(headers: Sequence[str], rows: Sequence[Row]) -> str:
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(out)


def markdown_table(headers: Sequence[str], rows: Sequence[Row]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def percentile(samples: Sequence[float], q: float) -> float:
    if not len(samples):
        return float("nan")
    return float(np.percentile(np.asarray(samples, dtype=float), q))


def section(name: str, title: str, command: str, body: str) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"<!-- bench:{name} start -->\n## {title}\n\n"
        f"- date: {now}\n- machine: {machine()}\n- command: `{command}`\n\n"
        f"{body.strip()}\n<!-- bench:{name} end -->\n"
    )


def write_section(path: Path, name: str, text: str) -> None:
    """Replace (or append) the ``name`` section of the results file."""
    old = path.read_text(encoding="utf-8") if path.exists() else RESULTS_TITLE
    pattern = re.compile(
        rf"<!-- bench:{re.escape(name)} start -->.*?<!-- bench:{re.escape(name)} end -->\n?",
        re.DOTALL,
    )
    if pattern.search(old):
        new = pattern.sub(lambda _: text, old, count=1)
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new, encoding="utf-8")


def report(
    args: argparse.Namespace, name: str, title: str, command: str, body: str
) -> None:
    """Write the section unless ``--no-write``; say where it went."""
    if args.no_write:
        return
    write_section(args.results, name, section(name, title, command, body))
    print(f"\n(section '{name}' of {args.results} updated)")
