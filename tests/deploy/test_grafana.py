"""The Grafana dashboard and its provisioning agree with each other and with docker-compose.yml."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

from tests.deploy.support import (
    COMPOSE_FILE,
    DASHBOARD,
    GRAFANA_PROVISIONING,
    ROOT,
    load_yaml,
)


def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return dashboard


def _grafana_mounts() -> dict[str, str]:
    """Container path -> host path of the grafana service's bind mounts."""
    volumes = load_yaml(COMPOSE_FILE)["services"]["grafana"]["volumes"]
    mounts = {}
    for spec in volumes:
        source, target, *_ = spec.split(":")
        if source.startswith("./"):
            mounts[target] = source
    return mounts


def _host_path(container_path: str) -> PurePosixPath:
    """The host file behind a path inside the grafana container (via the compose bind mounts)."""
    for target, source in _grafana_mounts().items():
        target_path = PurePosixPath(target)
        if PurePosixPath(container_path).is_relative_to(target_path):
            rest = PurePosixPath(container_path).relative_to(target_path)
            return PurePosixPath(source) / rest
    raise AssertionError(f"{container_path} is not mounted into the grafana container")


def test_dashboard_structure() -> None:
    dash = _dashboard()
    assert dash["uid"] and dash["title"]
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, panel["title"]
        assert pos["h"] > 0, panel["title"]
        if panel["type"] == "row":  # a row header: no query, a full-width line
            assert (pos["x"], pos["w"], pos["h"]) == (0, 24, 1) and "targets" not in panel
            continue
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in _dashboard()["panels"]:
        pos = panel["gridPos"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_dashboard_uses_the_provisioned_datasource() -> None:
    datasources = load_yaml(GRAFANA_PROVISIONING / "datasources" / "prometheus.yml")["datasources"]
    uids = {d["uid"]: d for d in datasources}
    used = set()
    for panel in _dashboard()["panels"]:
        if panel["type"] == "row":
            continue  # a row header queries nothing
        for ref in [panel["datasource"], *(t["datasource"] for t in panel["targets"])]:
            used.add(ref["uid"])
            assert ref["type"] == uids[ref["uid"]]["type"] == "prometheus"
    assert used and used <= set(uids)
    # The datasource URL names the compose service and its container port.
    prom = next(iter(uids.values()))
    compose = load_yaml(COMPOSE_FILE)
    assert prom["url"] == "http://prometheus:9090"
    assert "prometheus" in compose["services"]


def test_provisioning_is_mounted_and_loads_this_dashboard() -> None:
    assert _host_path("/etc/grafana/provisioning") == PurePosixPath("./deploy/grafana/provisioning")
    assert (ROOT / GRAFANA_PROVISIONING.relative_to(ROOT)).is_dir()
    providers = load_yaml(GRAFANA_PROVISIONING / "dashboards" / "pufferfish.yml")["providers"]
    assert len(providers) == 1 and providers[0]["type"] == "file"
    host_dir = _host_path(providers[0]["options"]["path"])
    assert (ROOT / host_dir / DASHBOARD.name).resolve() == DASHBOARD.resolve()
    home = load_yaml(COMPOSE_FILE)["services"]["grafana"]["environment"][
        "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (ROOT / _host_path(home)).resolve() == DASHBOARD.resolve()
