"""The Grafana dashboard's queries against a real Prometheus (no drawing): panels and their
targets with Grafana's variables replaced by concrete values, and /api/v1/query_range results.
Used by deploy/grafana/render.py."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

_VAR = re.compile(r"\$\{(\w+)(?::[\w]+)?\}|\$(\w+)|\[\[(\w+)\]\]")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {"ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


class RenderError(RuntimeError):
    """A one-line reason to stop (exit 2)."""


@dataclass
class Series:
    label: str
    times: list[float]
    values: list[float]


@dataclass
class Target:
    ref: str
    expr: str
    query: str
    legend: str | None
    series: list[Series] = field(default_factory=list)
    error: str | None = None


@dataclass
class Panel:
    id: int
    title: str
    kind: str
    unit: str
    grid: tuple[int, int, int, int]  # x, y, w, h on Grafana's 24-column grid
    targets: list[Target]
    png: str = ""


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus duration ("15s", "1m30s")."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise RenderError(f"not a Prometheus duration: {text!r}")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def substitute(expr: str, variables: dict[str, str]) -> str:
    """expr with $name, ${name} and [[name]] replaced; an unknown variable is an error."""
    def one(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name not in variables:
            raise RenderError(f"unknown variable ${name} in {expr!r}: pass --var {name}=VALUE")
        return variables[name]
    return _VAR.sub(one, expr)


def dashboard_vars(dashboard: dict[str, Any]) -> dict[str, str]:
    """The current values of the dashboard's own variables (a multi-value as a regex)."""
    out = {}
    for var in dashboard.get("templating", {}).get("list", []):
        value = var.get("current", {}).get("value")
        if value in (None, "$__all", ["$__all"]):
            value = var.get("allValue") or ".+"
        out[var["name"]] = "|".join(value) if isinstance(value, list) else str(value)
    return out


def time_vars(range_s: float, step: float, scrape: float) -> dict[str, str]:
    rate = max(step + scrape, 4 * scrape)  # Grafana's $__rate_interval
    return {"__interval": f"{step:g}s", "__interval_ms": f"{step * 1000:g}",
            "__rate_interval": f"{rate:g}s", "__range": f"{range_s:g}s",
            "__range_s": f"{range_s:g}", "__range_ms": f"{range_s * 1000:g}"}


def _get(url: str, timeout: float = 10.0) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - operator's URL
            return dict(json.loads(resp.read()))
    except urllib.error.HTTPError as exc:  # 400/422 carry {"status": "error", "error": ...}
        try:
            return dict(json.loads(exc.read()))
        except ValueError:  # e.g. a 404 page: not a Prometheus API
            raise ValueError(f"HTTP {exc.code} from {url} (not a Prometheus API?)") from None


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def call(self, path: str, **params: Any) -> dict[str, Any]:
        full = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            return _get(full)
        except (OSError, ValueError) as exc:  # HTTPError is an OSError: _get handled it
            raise RenderError(f"cannot reach Prometheus at {self.url}: {exc}") from exc

    def scrape_interval(self) -> float:
        """The global scrape_interval of the server's loaded config (15 s if it cannot say)."""
        config = self.call("/api/v1/status/config").get("data", {}).get("yaml", "")
        found = re.search(r"^\s*scrape_interval:\s*(\S+)", config, re.M)
        return parse_duration(found.group(1)) if found else 15.0

    def range_query(self, target: Target, start: float, end: float, step: float) -> None:
        answer = self.call("/api/v1/query_range", query=target.query, start=start, end=end,
                           step=step)
        if answer.get("status") != "success":
            target.error = f"{answer.get('errorType', 'error')}: {answer.get('error', answer)}"
            return
        for result in answer["data"]["result"]:
            labels = result.get("metric", {})
            times = [float(t) for t, _ in result["values"]]
            values = [float(v) for _, v in result["values"]]
            target.series.append(Series(_legend(target, labels), times, values))


def _legend(target: Target, labels: dict[str, str]) -> str:
    if target.legend and target.legend != "__auto":
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), target.legend)
    shown = {k: v for k, v in labels.items() if k != "__name__"}
    if not shown:
        return target.expr if len(target.expr) <= 40 else target.ref
    pairs = ", ".join(f'{k}="{v}"' for k, v in shown.items())
    return labels.get("__name__", "") + "{" + pairs + "}"


def load_panels(dashboard: dict[str, Any], variables: dict[str, str]) -> list[Panel]:
    panels: list[Panel] = []
    for raw in _walk(dashboard.get("panels", [])):
        if not raw.get("targets"):
            continue
        pos = raw.get("gridPos", {})
        targets = [Target(t.get("refId", "?"), t["expr"], substitute(t["expr"], variables),
                          t.get("legendFormat")) for t in raw["targets"] if "expr" in t]
        panels.append(Panel(int(raw.get("id", len(panels) + 1)), raw.get("title", ""),
                            raw.get("type", "timeseries"),
                            raw.get("fieldConfig", {}).get("defaults", {}).get("unit", ""),
                            (pos.get("x", 0), pos.get("y", 0), pos.get("w", 12), pos.get("h", 8)),
                            targets))
    return panels


def _walk(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [q for p in panels for q in [p, *_walk(p.get("panels", []))]]
