"""Render the Grafana dashboard's panels from a real Prometheus into PNGs (no Grafana needed).

For every panel, each target's PromQL (Grafana variables replaced by concrete values) is asked
of Prometheus' /api/v1/query_range over the last --minutes and every series is plotted under the
panel's title: one PNG per panel, dashboard.png with all panels on the dashboard's grid, and
summary.json (series per target). Exit 0: all rendered; 1: some query failed (its panel says
why); 2: bad arguments, unreadable dashboard or Prometheus unreachable (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deploy.grafana.queries import (
    Panel,
    Prometheus,
    RenderError,
    Target,
    dashboard_vars,
    load_panels,
    time_vars,
)

DEFAULT_DASHBOARD = Path(__file__).resolve().parent / "dashboards/pufferfish.json"
DEFAULT_VARS = {"job": "pufferfish", "instance": ".+"}
POINTS = 240  # samples per series over the range (Grafana's resolution is similar)


def fmt(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return str(value)
    if unit == "s":
        return f"{value * 1000:.3g} ms" if 0 < abs(value) < 1 else f"{value:.3g} s"
    suffix = {"ops": " /s", "percentunit": ""}.get(unit, "")
    return f"{value * 100:.3g}%" if unit == "percentunit" else f"{value:.4g}{suffix}"


def draw(ax: Any, panel: Panel, start: float, end: float) -> None:
    import matplotlib.dates as mdates

    ax.set_title(panel.title, loc="left", fontsize=10, fontweight="bold")
    errors = [f"{t.ref}: {t.error}" for t in panel.targets if t.error]
    series = [s for t in panel.targets for s in t.series]
    when = [datetime.fromtimestamp(x, UTC) for x in (start, end)]
    ax.set_xlim(*when)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))  # type: ignore[no-untyped-call]
    ax.tick_params(labelsize=7)
    for s in series:
        t = [datetime.fromtimestamp(x, UTC) for x in s.times]
        if panel.kind == "stat":
            ax.fill_between(t, s.values, alpha=0.15)
        else:  # a point with no finite neighbour would be invisible as a line alone
            ok = [math.isfinite(v) for v in s.values]
            lonely = any(f and not any(ok[max(i - 1, 0):i] + ok[i + 1:i + 2])
                         for i, f in enumerate(ok))
            ax.plot(t, s.values, label=s.label, linewidth=1.4, marker="o" if lonely else None,
                    markersize=2.5)
    if panel.kind == "stat":
        ax.set_xticks([])
        ax.set_yticks([])
        last = [next((v for v in reversed(s.values) if math.isfinite(v)), math.nan)
                for s in series]
        text = "\n".join(fmt(v, panel.unit) for v in last[:3]) or "No data"
        ax.text(0.5, 0.45, text, transform=ax.transAxes, ha="center", va="center",
                fontsize=22 if len(last) <= 1 else 14, fontweight="bold", color="#1f6f3f")
    elif series:
        ax.grid(alpha=0.3)
        if panel.unit not in ("", "short", "none"):
            ax.set_ylabel({"s": "seconds", "ops": "per second"}.get(panel.unit, panel.unit),
                          fontsize=8)
        ax.legend(fontsize=7, loc="upper left", ncol=1 + len(series) // 6, framealpha=0.6)
    else:
        ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center")
    if errors:
        ax.text(0.01, 0.02, "\n".join(errors)[:300], transform=ax.transAxes, fontsize=7,
                color="#b00020", va="bottom", wrap=True)


WIDTH, ROW, HEADER = 16.0, 0.42, 0.55  # inches: figure width, one grid row, the title band
# inches kept around a panel's plot: left, right, top (its title), bottom (its time axis)
PADS = {"stat": (0.15, 0.15, 0.32, 0.12), "timeseries": (0.65, 0.15, 0.32, 0.42)}


def _box(panel: Panel, fig_height: float) -> tuple[float, float, float, float]:
    """The panel's plot rectangle in figure coordinates (the dashboard's 24-column grid)."""
    x, y, w, h = panel.grid
    unit = WIDTH / 24
    left, right, top, bottom = PADS.get(panel.kind, PADS["timeseries"])
    plot_top = HEADER + y * ROW + top
    height = h * ROW - top - bottom
    return ((x * unit + left) / WIDTH, 1 - (plot_top + height) / fig_height,
            (w * unit - left - right) / WIDTH, height / fig_height)


def png_name(panel: Panel) -> str:
    title = panel.title.lower().replace("θ", "theta").replace("ε", "epsilon")
    slug = re.sub(r"[^a-z0-9]+", "-", title).strip("-")[:50]
    return f"panel-{panel.id:02d}-{slug}.png"


def render(panels: list[Panel], out: Path, start: float, end: float, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    for panel in panels:
        _, _, w, h = panel.grid
        fig, ax = plt.subplots(figsize=(max(w * 0.6, 5.0), max(h * 0.55, 2.6)), dpi=100)
        draw(ax, panel, start, end)
        fig.tight_layout()
        panel.png = png_name(panel)
        fig.savefig(out / panel.png)
        plt.close(fig)
    rows = max((p.grid[1] + p.grid[3] for p in panels), default=1)
    height = HEADER + rows * ROW
    fig = plt.figure(figsize=(WIDTH, height), dpi=80)
    for panel in panels:
        draw(fig.add_axes(_box(panel, height)), panel, start, end)
    first, last = (datetime.fromtimestamp(t, UTC) for t in (start, end))
    fig.suptitle(f"{title}   {first:%Y-%m-%d %H:%M:%S} → {last:%H:%M:%S} UTC", fontsize=13,
                 x=0.01, y=1 - 0.12 / height, ha="left", va="top")
    fig.savefig(out / "dashboard.png")
    plt.close(fig)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (not argparse's usage block)
        raise RenderError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m deploy.grafana.render",
                description=__doc__.splitlines()[0])
    p.add_argument("--prometheus", required=True,
                   help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    p.add_argument("--out", required=True, type=Path, help="directory for the PNGs")
    p.add_argument("--dashboard", type=Path, default=DEFAULT_DASHBOARD, help="dashboard JSON")
    p.add_argument("--minutes", type=float, default=15.0, help="length of the time range")
    p.add_argument("--end", type=float, default=None, help="end of the range, unix seconds "
                   "(default: now)")
    p.add_argument("--scrape-interval", type=float, default=None,
                   help="seconds (default: the server's global scrape_interval)")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                   help="a dashboard variable (default: job=pufferfish, instance=.+)")
    return p


@dataclass
class Collected:
    title: str
    panels: list[Panel]
    start: float
    end: float
    step: float


def collect(args: argparse.Namespace) -> Collected:
    """Every panel's targets asked of Prometheus over the range (nothing drawn)."""
    if not args.minutes > 0:
        raise RenderError("--minutes must be > 0")
    try:
        dashboard = json.loads(args.dashboard.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RenderError(f"cannot read dashboard {args.dashboard}: {exc}") from exc
    prom = Prometheus(args.prometheus)
    scrape = args.scrape_interval or prom.scrape_interval()
    end = time.time() if args.end is None else args.end
    start = end - args.minutes * 60
    step = max(scrape, math.ceil((end - start) / POINTS))
    variables = {**DEFAULT_VARS, **dashboard_vars(dashboard),
                 **time_vars(end - start, step, scrape)}
    for item in args.var:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise RenderError(f"--var {item!r}: expected NAME=VALUE")
        variables[name] = value
    panels = load_panels(dashboard, variables)
    for panel in panels:
        for target in panel.targets:
            prom.range_query(target, start, end, step)
    return Collected(dashboard.get("title", "dashboard"), panels, start, end, step)


def finite_max(target: Target) -> float | None:
    """The largest finite value of any of the target's series (None: no finite value)."""
    values = [v for s in target.series for v in s.values if math.isfinite(v)]
    return max(values) if values else None


def summary(got: Collected, prometheus: str) -> dict[str, Any]:
    def one(t: Target) -> dict[str, Any]:
        return {"refId": t.ref, "expr": t.expr, "query": t.query, "error": t.error,
                "series": len(t.series), "max": finite_max(t),
                "finite": sum(any(map(math.isfinite, s.values)) for s in t.series)}

    return {"prometheus": prometheus, "start": got.start, "end": got.end, "step": got.step,
            "grid": "dashboard.png", "panels": [
                {"id": p.id, "title": p.title, "type": p.kind, "png": p.png,
                 "targets": [one(t) for t in p.targets]} for p in got.panels]}


def run(args: argparse.Namespace) -> Collected:
    got = collect(args)
    try:
        render(got.panels, args.out, got.start, got.end, got.title)
        text = json.dumps(summary(got, args.prometheus), indent=2, ensure_ascii=False)
        (args.out / "summary.json").write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise RenderError(f"cannot write to {args.out}: {exc}") from exc
    return got


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        panels = run(args).panels
    except RenderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failed = 0
    for panel in panels:
        counts = ", ".join(f"{t.ref}={'ERROR' if t.error else len(t.series)}"
                           for t in panel.targets)
        print(f"panel {panel.id} {panel.title!r}: {counts} -> {panel.png}")
        for t in panel.targets:
            if t.error:
                failed += 1
                print(f"error: panel {panel.title!r} query {t.ref}: {t.error}", file=sys.stderr)
    print(f"wrote {len(panels)} panels and dashboard.png to {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
