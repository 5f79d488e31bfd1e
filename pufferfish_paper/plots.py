"""PNG figures (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from pufferfish_paper.results import CurveFigure, PlanFigure  # noqa: E402

DPI = 110


def _wrap(text: str, width: int = 70) -> str:
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    lines.append(line)
    return "\n".join(lines)


def plot_curves(fig_data: CurveFigure, path: Path) -> None:
    """Top: theta vs eps (printed points as markers). Bottom: exact audited loss / eps."""
    eps = fig_data.eps
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8.5, 8.0), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    for c in fig_data.curves:
        style = dict(c.style)
        top.plot(eps, c.theta, label=c.label, linewidth=1.8, **style)
        if c.paper is not None:
            have = ~np.isnan(c.paper)
            top.plot(eps[have], c.paper[have], linestyle="none", marker="o", markersize=5,
                     markerfacecolor="none", color=style.get("color"),
                     label=f"printed in paper ({c.key})")
        ratio = c.loss / eps
        bottom.plot(eps, ratio, label=c.label, linewidth=1.8, **style)
    bottom.axhline(1.0, color="grey", linewidth=1.0, linestyle="-")
    bottom.text(eps[-1], 1.0, "loss = eps: private at or below ", va="bottom", ha="right",
                fontsize=8, color="dimgrey")
    if fig_data.logy:
        top.set_yscale("log")
        top.set_xscale("log")
        bottom.set_xscale("log")
    top.set_ylabel("noise scale theta")
    top.set_title(_wrap(fig_data.title, 80), fontsize=10)
    top.grid(True, which="both", alpha=0.3)
    top.legend(fontsize=8, loc="upper right")
    bottom.set_xlabel("privacy budget eps")
    bottom.set_ylabel("exact audited loss / eps")
    bottom.set_title(_wrap("audited on " + fig_data.audited_on, 90), fontsize=9)
    top_ratio = max(float(np.nanmax(c.loss / eps)) for c in fig_data.curves)
    bottom.set_ylim(0.0, max(1.2, top_ratio * 1.08))
    bottom.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_plan(plan: PlanFigure, path: Path, annotate: bool = False) -> None:
    """Heatmap of pi*(x, x'); cells with |x - x'| = sup are outlined in red."""
    pts = plan.points
    m = np.where(plan.matrix > 0.0, plan.matrix, np.nan)
    n = pts.size
    size = min(9.0, 3.0 + 0.42 * n)
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    image = ax.imshow(m, origin="lower", cmap="viridis", aspect="equal")
    fig.colorbar(image, ax=ax, label="pi*(x, x')  (blank: 0)", shrink=0.8)
    ticks = np.arange(n)
    labels = [f"{x:g}" for x in pts]
    ax.set_xticks(ticks, labels, fontsize=8)
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_xlabel("x' (second prior of X)")
    ax.set_ylabel("x (first prior of X)")
    rows, cols = np.nonzero(plan.matrix)
    for r, c in zip(rows, cols, strict=True):
        if abs(abs(pts[r] - pts[c]) - plan.spread) < 1e-9:
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="red",
                                   linewidth=2.0))
        if annotate:
            bright = plan.matrix[r, c] > 0.6 * np.nanmax(m)
            ax.text(float(c), float(r), f"{plan.matrix[r, c]:.3g}", ha="center", va="center",
                    fontsize=9, color="black" if bright else "white")
    ax.plot([-0.5, n - 0.5], [-0.5, n - 0.5], color="grey", linewidth=0.8, linestyle=":",
            label="x = x'")
    ax.set_title(_wrap(
        f"{plan.name}: {plan.title}. sup |x - x'| on supp(pi*) = {plan.spread:g} "
        f"(paper: {plan.paper_spread:g}); red boxes attain it", 60), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
