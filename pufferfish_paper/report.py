"""CSV files and report.md for a reproduce run."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from pufferfish_paper.results import Curve, CurveFigure, PlanFigure, TableCheck, UtilityRow
from pufferfish_paper.utility import Example


def _g(x: float) -> str:
    return "nan" if np.isnan(x) else repr(float(x))


def write_rows(path: Path, header: list[str], rows: Iterable[Iterable[object]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for row in rows:
            w.writerow([_g(v) if isinstance(v, float) else v for v in row])


def curve_csv(f: CurveFigure, path: Path) -> None:
    header = ["eps"]
    columns: list[np.ndarray] = [f.eps]
    for c in f.curves:
        header.append(f"{c.key}_theta")
        columns.append(c.theta)
        if c.paper is not None:
            header.append(f"{c.key}_paper")
            columns.append(c.paper)
        header.append(f"{c.key}_loss_over_eps")
        columns.append(c.loss / f.eps)
    write_rows(path, header, ([float(col[k]) for col in columns] for k in range(f.eps.size)))


def plan_csvs(p: PlanFigure, plan_path: Path, theta_path: Path) -> None:
    rows, cols = np.nonzero(p.matrix)
    write_rows(plan_path, ["x", "x_prime", "mass", "abs_x_minus_x_prime"],
               ([float(p.points[r]), float(p.points[c]), float(p.matrix[r, c]),
                 float(abs(p.points[r] - p.points[c]))] for r, c in zip(rows, cols, strict=True)))
    write_rows(theta_path, ["eps", "kantorovich_theta", "kantorovich_loss_over_eps",
                            "exact_user_theta", "exact_loss_over_eps"],
               ([float(e), p.spread / e, float(lr / e), float(t), float(el / e)]
                for e, lr, t, el in zip(p.eps, p.rule_loss, p.exact_theta, p.exact_loss,
                                        strict=True)))


def utility_csv(rows: list[UtilityRow], path: Path) -> None:
    write_rows(path, ["example", "eps", "rule", "theta", "noise_sd", "dp_theta", "dp_noise_sd",
                      "sd_ratio_to_dp", "audited_loss", "loss_over_eps", "private", "audited_on"],
               ([r.example, r.eps, r.rule, r.theta, r.sd, r.dp_theta, np.sqrt(2) * r.dp_theta,
                 r.sd_ratio, r.loss, r.loss / r.eps, "yes" if r.private else "NO", r.audited_on]
                for r in rows))


# -- report.md ---------------------------------------------------------------------------


@dataclass
class Report:
    plan_figures: list[PlanFigure] = field(default_factory=list)
    curve_figures: list[CurveFigure] = field(default_factory=list)
    table_checks: list[TableCheck] = field(default_factory=list)
    utility: list[UtilityRow] = field(default_factory=list)
    examples: list[Example] = field(default_factory=list)
    codings: list[str] = field(default_factory=list)
    files: dict[str, list[str]] = field(default_factory=dict)  # item -> file names
    seconds: float = 0.0
    command: str = ""


def _theta_summary(eps: np.ndarray, theta: np.ndarray) -> str:
    have = ~np.isnan(theta)
    if not have.any():
        return "—"
    e, t = eps[have], theta[have]
    return f"θ({e[0]:.4g})={t[0]:.12g}; θ({e[-1]:.4g})={t[-1]:.12g}"


def _ratio_text(ratio: np.ndarray, eps: np.ndarray) -> str:
    k = int(np.nanargmax(ratio))
    return f"{ratio[k]:.6g} (max, at ε={eps[k]:.4g})"


def _private_text(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def _curve_row(f: CurveFigure, c: Curve) -> list[str]:
    m = c.match()
    if c.key == "as_printed":
        ours, match = "the paper's numbers (data)", "— (shown as printed)"
        paper = _theta_summary(f.eps, c.theta)
    else:
        ours = _theta_summary(f.eps, c.theta)
        paper = _theta_summary(f.eps, c.paper) if c.paper is not None else "— (not in paper)"
        match = m[1] if m is not None else "—"
    return [f"{f.name}: {c.label}", ours, paper, match, _ratio_text(c.loss / f.eps, f.eps),
            _private_text(c.passes(f.eps))]


def _plan_rows(p: PlanFigure) -> list[list[str]]:
    spread_ok = p.spread == p.paper_spread
    coeff_ok = abs(p.rule_coefficient - p.paper_spread) < 1e-12
    k_ratio = p.rule_loss / p.eps
    x_ratio = p.exact_loss / p.eps
    return [
        [f"{p.name}: sup |x−x'| on supp(π*) → θ = sup/ε (Prop. 1)", f"{p.spread:g}",
         f"{p.paper_spread:g}", "yes" if spread_ok else "NO", _ratio_text(k_ratio, p.eps),
         _private_text(bool(np.all(k_ratio <= 1 + 1e-9)))],
        [f"{p.name}: {p.rule_name}, θ·ε", f"{p.rule_coefficient:g}", f"{p.paper_spread:g}",
         "yes" if coeff_ok else "NO", "same θ as the row above", "—"],
        [f"{p.name}: {p.exact_label}", f"{np.min(p.exact_theta * p.eps):.6g} – "
         f"{np.max(p.exact_theta * p.eps):.6g} over the ε grid", "— (not in paper)", "—",
         _ratio_text(x_ratio, p.eps), _private_text(bool(np.all(x_ratio <= 1 + 1e-9)))],
    ]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return out


def _prose_sections() -> dict[str, list[str]]:
    """The fixed prose of the report by section title (pufferfish_paper/report_prose.md)."""
    prose = resources.files("pufferfish_paper").joinpath("report_prose.md")
    text = prose.read_text(encoding="utf-8")
    sections: dict[str, list[str]] = {}
    for part in text.split("\n## ")[1:]:
        title, _, body = part.partition("\n")
        sections[title] = body.strip("\n").split("\n")
    return sections


def _prose(title: str) -> list[str]:
    """A fixed prose section: its heading, a blank line, its lines, a blank line."""
    return ["", f"## {title}", "", *_prose_sections()[title], ""]


def render(r: Report) -> str:
    lines = [
        "# `pufferfish reproduce`: the paper's numbers, regenerated and audited",
        "",
        f"Command: `{r.command}` — run time {r.seconds:.1f} s.",
        "",
        "Every θ below comes from `core.calibrators`; every loss is the exact two-sided "
        "privacy loss from `core.auditor.audit`. A θ is **private** when its loss is at most "
        "ε·(1+1e-9) at every ε of the grid. 'Match' compares with the numbers printed in the "
        "paper (tikz tables and appendix tables); printed curve values have 15 significant "
        "digits, so 'all printed digits' means an exact reproduction.",
        "",
        "## Summary",
        "",
    ]
    rows: list[list[str]] = []
    for p in r.plan_figures:
        rows += _plan_rows(p)
    for f in r.curve_figures:
        rows += [_curve_row(f, c) for c in f.curves]
    for t in r.table_checks:
        rows.append([t.what, t.ours, t.paper, t.verdict, "—", "—"])
    if r.utility:
        ratios = [u.sd_ratio for u in r.utility if u.rule == "exact user-local"]
        rows.append(["Utility table (item 6): exact θ / plain-DP θ",
                     f"{min(ratios):.3g} – {max(ratios):.3g}", "— (not in paper)", "—",
                     f"{max(u.loss / u.eps for u in r.utility):.6g} (max over all rules)",
                     _private_text(all(u.private for u in r.utility))])
    lines += _table(["item", "our value", "paper's value", "match?", "audited loss/ε",
                     "private?"], rows)
    lines += ["", "## Curves that fail the exact audit", ""]
    failing = [(f, c) for f in r.curve_figures for c in f.curves if not c.passes(f.eps)]
    for f, c in failing:
        bad = f.eps[c.loss > f.eps * (1 + 1e-9)]
        lines.append(f"- {f.name}: {c.label} — loss/ε up to {np.nanmax(c.loss / f.eps):.4g}; "
                     f"fails for ε in [{bad.min():.4g}, {bad.max():.4g}]. {c.note}")
    if not failing:
        lines.append("- none")
    lines += _prose("What cannot be reproduced")
    lines += ["## Notes per figure", ""]
    for f in r.curve_figures:
        lines.append(f"- **{f.name}** (audited on {f.audited_on}):")
        lines += [f"  - {n}" for n in f.notes]
    lines += _prose("UCI data and value encodings")
    lines += [f"- {c}" for c in r.codings]
    lines += _prose("Utility (item 6)")
    for ex in r.examples:
        lines += [f"### {ex.name} — DP sensitivity: {ex.sensitivity_text}", ""]
        urows = [[f"{u.eps:g}", u.rule, f"{u.theta:.6g}", f"{u.sd:.6g}", f"{u.sd_ratio:.4g}",
                  f"{u.loss / u.eps:.6g}", _private_text(u.private), u.audited_on]
                 for u in r.utility if u.example == ex.name]
        lines += _table(["ε", "rule", "θ", "noise sd", "sd / DP sd", "loss/ε", "private?",
                         "audited on"], urows)
        lines.append("")
    lines += ["## Files", ""]
    for item, names in r.files.items():
        lines.append(f"- {item}: " + ", ".join(f"`{n}`" for n in names))
    return "\n".join(lines) + "\n"
