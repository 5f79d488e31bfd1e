"""Paths and helpers shared by the deploy tests.

No Docker engine runs here: deploy files are checked statically.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from stream_app.metrics import METRIC_NAMES, Metrics
from stream_app.settings import Settings
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
RULES_FILE = DEPLOY / "prometheus" / "rules.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "pufferfish.json"
GRAFANA_PROVISIONING = DEPLOY / "grafana" / "provisioning"
K8S = DEPLOY / "k8s"

# The topics docker-compose creates and their partition counts (docs/design.md: inputs are
# partitioned by user, releases and the internal partials topic are single-partition).
EXPECTED_TOPICS = {
    "reports": 4,
    "membership": 4,
    "releases": 1,
    "priors": 1,
    "deadletter": 1,
    "pufferfish-partials": 1,
    "pufferfish-tree-nodes": 1,  # the tree's node journal (release_mechanism tree)
}

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_METRIC_TOKEN = re.compile(r"(?<![A-Za-z0-9_:])pufferfish_[A-Za-z0-9_:]*")


def load_yaml(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def load_yaml_documents(path: Path) -> list[Any]:
    with open(path, encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def metric_types() -> dict[str, str]:
    """Exported name (as in METRIC_NAMES) -> Prometheus type, read from a fresh Metrics registry."""
    types: dict[str, str] = {}
    metrics = Metrics.create()
    metrics.show_window()  # exported only with privacy windows
    for family in metrics.registry.collect():
        if not family.name.startswith("pufferfish_"):
            continue  # the standard process, platform and GC collectors
        name = family.name + "_total" if family.type == "counter" else family.name
        types[name] = family.type
    return types


def unresolved_metrics(names: Iterable[str]) -> set[str]:
    """The names that are not series the app exports.

    A name resolves if it is in METRIC_NAMES (gauges, and counters with their `_total`), or is a
    histogram of METRIC_NAMES with a `_bucket`, `_sum` or `_count` suffix.
    """
    types = metric_types()
    bad = set()
    for name in names:
        if name in METRIC_NAMES:
            continue
        base = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), None)
        if base is not None and base in METRIC_NAMES and types.get(base) == "histogram":
            continue
        bad.add(name)
    return bad


def promql_metric_names(expr: str) -> set[str]:
    """Every pufferfish_* identifier in a PromQL expression (string literals excluded)."""
    without_strings = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    return set(_METRIC_TOKEN.findall(without_strings))


def dashboard_exprs(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, expr) for every query target of every panel, rows included."""
    def walk(panels: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
        for panel in panels:
            for target in panel.get("targets", []):
                if "expr" in target:
                    yield panel.get("title", "?"), target["expr"]
            yield from walk(panel.get("panels", []))
    yield from walk(dashboard.get("panels", []))


def rule_exprs(rules: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(alert or record name, expr) for every rule of every group."""
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield rule.get("alert") or rule.get("record"), rule["expr"]


def settings_from_env(env: dict[str, Any]) -> Settings:
    """The worker's Settings as a deployment's PUFFERFISH_* environment would give them (only
    that environment: any PUFFERFISH_* of the test process is hidden); every name a field."""
    assert all(k.startswith("PUFFERFISH_") for k in env)
    fields = {k.removeprefix("PUFFERFISH_").lower() for k in env}
    assert fields <= set(Settings.model_fields), fields - set(Settings.model_fields)
    with pytest.MonkeyPatch.context() as mp:
        for key in list(os.environ):
            if key.startswith("PUFFERFISH_"):
                mp.delenv(key)
        for key, value in env.items():
            mp.setenv(key, str(value))
        return Settings()


# --- a real Prometheus on loopback (Debian package) with the project's config ----------------

def prometheus_scrape_config(worker_targets: Sequence[str], interval: str = "1s"
                             ) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml with only its targets and intervals changed. The
    `prometheus` job (Prometheus scraping itself, at the address it listens on) has no target:
    a test's Prometheus binds port 0, so its address is known only once it runs, and no test
    reads that job."""
    config: dict[str, Any] = load_yaml(PROMETHEUS_CONFIG)
    config["global"]["scrape_interval"] = interval
    config["global"]["evaluation_interval"] = interval
    config["rule_files"] = [str(PROMETHEUS_CONFIG.parent / f) for f in config["rule_files"]]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["pufferfish"].pop("dns_sd_configs")
    jobs["pufferfish"]["static_configs"] = [{"targets": list(worker_targets)}]
    jobs["prometheus"]["static_configs"] = []
    return config


def stop_process_group(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM the process group a `start_new_session=True` child leads, SIGKILL after grace."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=grace)


def _alive(proc: subprocess.Popen[bytes], log_path: Path) -> None:
    if proc.poll() is not None:
        pytest.fail(f"prometheus exited ({proc.returncode}): "
                    f"{log_path.read_text(errors='replace')[-2000:]}")


# What Prometheus logs once its web server listens (exporter-toolkit's "Listening on", at
# info level), with the address it got: the port the OS picked for --web.listen-address=:0.
PROMETHEUS_LISTENING = re.compile(r'msg="Listening on" address=127\.0\.0\.1:(\d+)')


def _prometheus_port(proc: subprocess.Popen[bytes], log_path: Path, offset: int) -> int:
    """The port Prometheus says it listens on, read from its log after `offset`."""
    def said() -> int | None:
        with open(log_path, "rb") as log:
            log.seek(offset)
            found = PROMETHEUS_LISTENING.search(log.read().decode(errors="replace"))
        return int(found.group(1)) if found else None

    port = wait_for(said, 30, "prometheus to say which port it listens on",
                    guard=lambda: _alive(proc, log_path),
                    detail=lambda: log_path.read_text(errors="replace")[-2000:])
    assert port is not None
    return port


def _prometheus_ready(port: int) -> bool:
    url = f"http://127.0.0.1:{port}/-/ready"
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:  # noqa: S310 - loopback
            return bool(resp.read().startswith(b"Prometheus"))
    except OSError:
        return False


@contextmanager
def running_prometheus(
    workdir: Path, worker_targets: Sequence[str], interval: str = "1s"
) -> Iterator[int]:
    """A Prometheus scraping `worker_targets` (host:port) every `interval`; yields its port.
    It binds port 0 and says in its log which port it got (prometheus.log in workdir, at
    info level); stopped (process group) on exit."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: apt-get install prometheus (scripts/test.sh does)"
    log_path = workdir / "prometheus.log"
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_scrape_config(worker_targets, interval)))
    offset = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             "--web.listen-address=127.0.0.1:0", "--log.level=info"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        port = _prometheus_port(proc, log_path, offset)
        wait_for(lambda: _prometheus_ready(port), 30, "prometheus to be ready",
                 guard=lambda: _alive(proc, log_path))
        yield port
    finally:
        stop_process_group(proc)
