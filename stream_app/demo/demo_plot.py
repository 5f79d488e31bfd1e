"""The demo's end-of-run picture: noisy vs exact sum with ±2 sd bands, and the privacy budget.

Top panel: each release's exact sum (line) and noisy sum (dots), the band exact ± 2·sd
(sd = θ·√(2·draws): one Laplace draw per release, or one per tree node it adds up; a single
Laplace draw falls outside ±2 sd with probability e^{-2√2} ≈ 6 %), and a dotted line at each
learning round. With a comparison sd (``independent_sd``: independent releases at the same
budget, `pufferfish plan`'s noise_sd_independent) a middle panel shows each release's error
against both bands, on one scale. With release_by_group a panel shows each group's noisy sums
and its band, exact ± 2 sd of the group's published noise_sd (noisy ± 2 sd where the exact sum
is unknown); the total's sd is then the published one (the groups' draws). Bottom panel: ε
spent after every release and learning round against the budget. Rendered with matplotlib's
Agg backend (no display needed).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
        written = write_plot(path or default_plot_path(), view.points, view.rounds, budget, t0,
                             view.independent_sd)
    except (OSError, ValueError) as exc:
        return f"plot not written: {exc}", False
    what = "" if view.independent_sd is None else ", independent releases' band"
    return (f"plot: {written.resolve()} (noisy vs exact sum, ±2 sd bands{what}, epsilon spent)",
            True)


def write_plot(path: Path, points: Sequence[Point], rounds: Sequence[Round], budget: float,
               t0: float, independent_sd: float | None = None) -> Path:
    """Draw the run into a PNG at ``path``; times are seconds since ``t0`` (wall clock)."""
    import matplotlib.pyplot as plt

    fig = draw(points, rounds, budget, t0, independent_sd)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path


def draw(points: Sequence[Point], rounds: Sequence[Round], budget: float, t0: float,
         independent_sd: float | None = None) -> Any:
    """The matplotlib Figure (module docstring); the caller closes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    known = [p for p in points if p.exact is not None]
    compare = independent_sd is not None
    grouped = any(p.groups for p in points)
    ratios = [3, *([2] if compare else []), *([3] if grouped else []), 1.3]
    fig, axes = plt.subplots(
        len(ratios), 1, figsize=(10, 7 + 2.5 * compare + 3.5 * grouped), sharex=True,
        gridspec_kw={"height_ratios": ratios},
    )
    top, bottom = axes[0], axes[-1]
    try:
        if known:
            t = [p.ts - t0 for p in known]
            exact = [float(p.exact) for p in known]  # type: ignore[arg-type]
            band = [2 * p.sd for p in known]
            top.fill_between(t, [e - b for e, b in zip(exact, band, strict=True)],
                             [e + b for e, b in zip(exact, band, strict=True)],
                             color="tab:blue", alpha=0.15, lw=0,
                             label="exact ± 2 sd of each release (sd = θ·√(2·draws))"
                             if not grouped else "exact ± 2 sd of each release (its published "
                             "noise_sd: the groups' draws)")
            admitted = any(p.mechanism == "tree" for p in known)
            top.plot(t, exact, "s-", color="tab:blue", lw=1.4, ms=3.5,
                     label="exact sum (known only to this simulation)" if not admitted else
                     "exact sum of admitted contributions (known only to this simulation; a "
                     "user's changes beyond max_changes_per_window wait for the next window)")
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
        if compare:
            assert independent_sd is not None
            _errors(axes[1], known, independent_sd, t0)
        if grouped:
            _groups(axes[-2], points, t0)
        for i, r in enumerate(_round_times(rounds)):
            for ax in axes:
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
    except BaseException:
        plt.close(fig)
        raise
    return fig


def comparison_text(points: Sequence[Point], independent_sd: float) -> str:
    """The sentence under the comparison panel: both sds (root mean square of the releases')."""
    if not points:
        return f"independent releases at the same budget: sd {independent_sd:,.4g}"
    sd = math.sqrt(sum(p.sd**2 for p in points) / len(points))
    return (f"independent releases at the same budget: sd {independent_sd:,.4g}, "
            f"{independent_sd / sd:,.3g}x this run's {sd:,.4g}")


def _errors(ax: Any, known: Sequence[Point], independent_sd: float, t0: float) -> None:
    """Each release's error with its own ±2 sd band and the independent mechanism's."""
    t = [p.ts - t0 for p in known]
    if known:
        ax.fill_between(t, [-2 * p.sd for p in known], [2 * p.sd for p in known],
                        color="tab:blue", alpha=0.3, lw=0, label="± 2 sd of this run's releases")
        ax.plot(t, [p.noisy - float(p.exact or 0.0) for p in known], "o", color="tab:red",
                ms=3.5, label="error = noisy − exact")
    ax.axhspan(-2 * independent_sd, 2 * independent_sd, color="tab:orange", alpha=0.12, lw=0,
               label="± 2 sd of independent releases at the same budget")
    ax.axhline(0, color="gray", lw=0.8)
    ax.set_ylim(-2.3 * independent_sd, 2.3 * independent_sd)
    ax.set_ylabel("error")
    ax.text(0.01, 0.03, comparison_text(known, independent_sd), transform=ax.transAxes,
            fontsize=8, color="dimgray")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)


def _groups(ax: Any, points: Sequence[Point], t0: float) -> None:
    """Each group's published noisy sums and its ±2 sd band (release_by_group)."""
    names = sorted({g for p in points for g in (p.groups or {})})
    for i, group in enumerate(names):
        color = f"C{i % 10}"
        got = [(p.ts - t0, p.groups[group]) for p in points if p.groups and group in p.groups]
        t = [x for x, _ in got]
        centre = [g.exact if g.exact is not None else g.noisy for _, g in got]
        ax.fill_between(t, [c - 2 * g.sd for c, (_, g) in zip(centre, got, strict=True)],
                        [c + 2 * g.sd for c, (_, g) in zip(centre, got, strict=True)],
                        color=color, alpha=0.15, lw=0, label=f"{group}: ± 2 sd")
        exact = [(x, g.exact) for x, g in got if g.exact is not None]
        if exact:
            ax.plot([x for x, _ in exact], [e for _, e in exact], "-", color=color, lw=1.2,
                    label=f"{group}: exact sum (this simulation only)")
        ax.plot(t, [g.noisy for _, g in got], "o", color=color, ms=3.5,
                label=f"{group}: noisy sum (published)")
    ax.set_ylabel("sum per group")
    ax.set_title("release_by_group: each group's noisy sum and its band (exact ± 2 sd)",
                 fontsize=9, loc="left")
    ax.legend(loc="best", fontsize=7, ncol=max(1, len(names)))
    ax.grid(alpha=0.3)


def _mean_error(points: Sequence[Point]) -> float:
    return sum(abs(p.noisy - float(p.exact or 0.0)) for p in points) / max(len(points), 1)


def _round_times(rounds: Sequence[Round]) -> list[float]:
    """One time per learning round (a round has one record per group)."""
    first: dict[int, float] = {}
    for r in rounds:
        first.setdefault(r.seq, r.ts)
    return [first[seq] for seq in sorted(first)]
