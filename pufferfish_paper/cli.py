"""`pufferfish reproduce --out DIR [--eps-grid N] [--quick]`: regenerate the paper's numbers."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from pufferfish_core.errors import PufferfishError
from pufferfish_paper import experiments, plots, report, uci_experiments, uci_inputs, utility
from pufferfish_paper.results import CurveFigure, PlanFigure

PROG = "pufferfish reproduce"
QUICK_GRID = 4
# Item 1 and Table ex2PiStar audit theta = sup/eps and the exact theta on this grid.
PLAN_EPS = (0.1, 1.0, 10)


class UsageError(PufferfishError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError("arguments", message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Regenerate every numeric result of the paper, side by "
                "side with the printed values and the exact audit.")
    p.add_argument("--out", metavar="DIR",
                   help="output directory, required (no default; created if missing)")
    p.add_argument("--eps-grid", metavar="N", help="points per epsilon grid (default: the "
                   "paper's grids; N smaller than the paper's picks N of its points)")
    p.add_argument("--quick", action="store_true",
                   help=f"small grids ({QUICK_GRID} points) for a fast check")
    return p


def _parse(argv: Sequence[str]) -> tuple[Path, int | None]:
    ns = _parser().parse_args(list(argv))
    if not ns.out:
        raise UsageError("out", "is required (--out DIR)")
    out = Path(ns.out)
    if out.exists() and not out.is_dir():
        raise UsageError("out", f"{out} exists and is not a directory")
    n: int | None = None
    if ns.eps_grid is not None:
        try:
            n = int(ns.eps_grid)
        except ValueError:
            raise UsageError("eps_grid", f"must be an integer, got {ns.eps_grid!r}") from None
        if not 2 <= n <= 10_000:
            raise UsageError("eps_grid", f"must be between 2 and 10000, got {n}")
    elif ns.quick:
        n = QUICK_GRID
    return out, n


def _plan_eps(n: int | None) -> np.ndarray:
    lo, hi, default = PLAN_EPS
    return np.linspace(lo, hi, default if n is None else n)


def run(out: Path, n: int | None, command: str) -> report.Report:
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    rep = report.Report(command=command)

    def curve_item(fig: CurveFigure) -> None:
        png, csv_name = f"{fig.slug}.png", f"{fig.slug}.csv"
        plots.plot_curves(fig, out / png)
        report.curve_csv(fig, out / csv_name)
        rep.curve_figures.append(fig)
        rep.files[fig.name] = [png, csv_name]

    def plan_item(p: PlanFigure, annotate: bool = False) -> None:
        names = [f"{p.slug}.png", f"{p.slug}.csv", f"{p.slug}_theta.csv"]
        plots.plot_plan(p, out / names[0], annotate=annotate)
        report.plan_csvs(p, out / names[1], out / names[2])
        rep.plan_figures.append(p)
        rep.files[p.name] = names

    def plans() -> None:
        for p in experiments.plan_figures(_plan_eps(n)):
            plan_item(p)

    def ex2() -> None:
        checks, figure = experiments.ex2_tables(_plan_eps(n))
        rep.table_checks.extend(checks)
        plan_item(figure, annotate=True)
        report.write_rows(out / "table_ex2.csv", ["what", "ours", "paper", "ok", "note"],
                          ([c.what, c.ours, c.paper, c.ok, c.note] for c in checks))
        rep.files[figure.name].append("table_ex2.csv")

    def uci() -> None:
        for fig in uci_experiments.uci_figures(n):
            curve_item(fig)
        rep.codings = [f"{i.dataset}: {i.description}; {i.coding}; {i.rows} rows in the "
                       f"sub-population" for i in uci_inputs.pperp_inputs()]
        rep.codings += [f"{i.dataset} (binary): {i.description}; {i.coding}; p = {i.p}, "
                        f"q = {i.q}" for i in uci_inputs.pqbinary_inputs()]

    def utility_item() -> None:
        exs = utility.examples()
        rows = utility.utility_rows(exs)
        rep.examples, rep.utility = exs, rows
        report.utility_csv(rows, out / "utility.csv")
        rep.files["Utility table"] = ["utility.csv"]

    steps: list[tuple[str, Callable[[], None]]] = [
        ("plans (item 1)", plans),
        ("fig:Brent", lambda: curve_item(experiments.brent_figure(n))),
        ("fig:SuffCondSPQBinaryRelax", lambda: curve_item(experiments.spq_binary_relax_figure(n))),
        ("UCI figures", uci),
        ("Table ex2", ex2),
        ("utility", utility_item),
    ]
    with tqdm(total=len(steps), file=sys.stderr, desc="reproduce", unit="item") as bar:
        for name, step in steps:
            bar.set_postfix_str(name)
            step()
            bar.update()
    rep.seconds = time.perf_counter() - start
    (out / "report.md").write_text(report.render(rep), encoding="utf-8")
    return rep


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        out, n = _parse(args)
    except UsageError as exc:
        print(f"pufferfish: error: {exc}", file=sys.stderr)
        return 2
    try:
        run(out, n, shlex.join(["pufferfish", "reproduce", *args]))
    except OSError as exc:
        print(f"pufferfish: error: out: {exc.strerror}: {exc.filename}", file=sys.stderr)
        return 2
    print(out / "report.md")
    return 0
