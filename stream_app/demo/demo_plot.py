"""The demo's end-of-run picture: noisy vs exact sum with ±2 sd bands, and the privacy budget.

Top panel: each release's exact sum (line) and noisy sum (dots), the band exact ± 2·sd
(sd = θ·√2; a Laplace draw falls outside it with probability e^{-2√2} ≈ 6 %), and a dotted
line at each learning round. Bottom panel: ε spent after every release and learning round
against the budget. Rendered with matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from stream_app.demo.demo_view import DemoView, Point, Round


def default_plot_path() -> Path:
    """A new file in the temporary directory (never overwrites, never lands in a checkout)."""
    fd, name = tempfile.mkstemp(prefix="pufferfish-demo-", suffix=".png")
    os.close(fd)
    return Path(name)


def plot_run(path: Path | None, view: DemoView, budget: float, t0: float) -> tuple[str, bool]:
    """Write the run's plot (to ``path``, or a new temporary file): (line to print, ok)."""
    view.fill_exact()
    try:
        written = write_plot(path or default_plot_path(), view.points, view.rounds, budget, t0)
    except (OSError, ValueError) as exc:
        return f"plot not written: {exc}", False
    return f"plot: {written.resolve()} (noisy vs exact sum, ±2 sd bands, epsilon spent)", True


def write_plot(path: Path, points: Sequence[Point], rounds: Sequence[Round], budget: float,
               t0: float) -> Path:
    """Draw the run into a PNG at ``path``; times are seconds since ``t0`` (wall clock)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    known = [p for p in points if p.exact is not None]
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(10, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]}
    )
    try:
        if known:
            t = [p.ts - t0 for p in known]
            exact = [float(p.exact) for p in known]  # type: ignore[arg-type]
            band = [2 * p.sd for p in known]
            top.fill_between(t, [e - b for e, b in zip(exact, band, strict=True)],
                             [e + b for e, b in zip(exact, band, strict=True)],
                             color="tab:blue", alpha=0.15, lw=0,
                             label="exact ± 2 sd (sd = θ·√2)")
            top.plot(t, exact, "s-", color="tab:blue", lw=1.4, ms=3.5,
                     label="exact sum (known only to this simulation)")
            top.vlines(t, exact, [p.noisy for p in known], color="gray", lw=0.8,
                       label="error = noisy − exact")
            inside = sum(abs(p.noisy - e) <= b for p, e, b in zip(known, exact, band, strict=True))
            top.text(0.01, 0.02, f"{len(points)} releases, {inside}/{len(known)} within ±2 sd; "
                     f"mean |error| {_mean_error(known):.2f}", transform=top.transAxes,
                     fontsize=8, color="dimgray")
        if points:
            top.plot([p.ts - t0 for p in points], [p.noisy for p in points], "o",
                     color="tab:red", ms=4.5, label="noisy sum (published)", zorder=3)
        else:
            top.text(0.5, 0.5, "no releases in this run", transform=top.transAxes,
                     ha="center", va="center", color="gray")
        for i, r in enumerate(_round_times(rounds)):
            for ax in (top, bottom):
                ax.axvline(r - t0, color="tab:green", ls=":", lw=1,
                           label="learning round" if i == 0 and ax is top else None)
        top.set_ylabel("sum of present users' latest values")
        top.set_title("pufferfish demo: published noisy sums vs the exact sums they hide")
        if points or rounds:
            top.legend(loc="best", fontsize=8)
        top.grid(alpha=0.3)

        spent = sorted([(p.ts, p.spent) for p in points] + [(r.ts, r.spent) for r in rounds])
        if spent:
            bottom.step([s[0] - t0 for s in spent], [s[1] for s in spent], where="post",
                        color="tab:purple", label="ε spent (releases and learning rounds)")
        bottom.axhline(budget, color="black", ls="--", lw=1, label=f"budget ε = {budget:g}")
        bottom.set_ylim(0, budget * 1.08)
        bottom.set_ylabel("privacy loss ε")
        bottom.set_xlabel("seconds since the demo started")
        bottom.legend(loc="center left", fontsize=8)
        bottom.grid(alpha=0.3)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path


def _mean_error(points: Sequence[Point]) -> float:
    return sum(abs(p.noisy - float(p.exact or 0.0)) for p in points) / max(len(points), 1)


def _round_times(rounds: Sequence[Round]) -> list[float]:
    """One time per learning round (a round has one record per group)."""
    first: dict[int, float] = {}
    for r in rounds:
        first.setdefault(r.seq, r.ts)
    return [first[seq] for seq in sorted(first)]
