"""docker-compose.yml: valid against the Compose Specification schema and consistent with the app.

No Docker engine runs here, so the file is validated statically (tests/deploy/compose_spec.json,
see COMPOSE_SPEC_NOTICE.md).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from stream_app.kafka.topics import wanted_topics
from stream_app.settings import Settings
from tests.deploy.manifests import compose_worker_env
from tests.deploy.support import COMPOSE_FILE, EXPECTED_TOPICS, ROOT, load_yaml, settings_from_env

# module-scoped fixtures below: one worker process runs this module (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("test_compose")

SCHEMA = Path(__file__).with_name("compose_spec.json")
LONG_RUNNING = ("kafka", "worker", "prometheus", "grafana")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = load_yaml(COMPOSE_FILE)
    assert isinstance(data, dict)
    return data


def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    # The file declares draft 2019-09 (with a non-canonical URL, so name the class explicitly).
    assert "2019-09" in schema["$schema"]
    cls = jsonschema.Draft201909Validator
    cls.check_schema(schema)
    # No format checker: compose's "duration" is Go-style ("10s"), not ISO 8601 (checked below).
    return cls(schema)


def test_compose_file_is_valid_against_the_compose_spec(compose: dict[str, Any]) -> None:
    errors = sorted(_validator().iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_catches_mistakes(compose: dict[str, Any]) -> None:
    # A validator that accepts anything would make the test above pointless.
    broken = json.loads(json.dumps(compose))
    broken["services"]["worker"]["restart_policy"] = "always"       # not a service key
    broken["services"]["kafka"]["healthcheck"]["interval"] = 10      # must be a duration string
    broken["services"]["worker"]["deploy"]["replicas"] = "two"
    paths = {tuple(e.path) for e in _validator().iter_errors(broken)}
    assert ("services", "worker") in paths
    assert ("services", "kafka", "healthcheck", "interval") in paths
    assert ("services", "worker", "deploy", "replicas") in paths


GO_DURATION = re.compile(r"(\d+(\.\d+)?(ns|us|ms|s|m|h))+")


def test_durations_are_go_style(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        durations = [v for k, v in service.get("healthcheck", {}).items() if k != "test"
                     and k != "retries"]
        if "stop_grace_period" in service:
            durations.append(service["stop_grace_period"])
        for value in durations:
            assert isinstance(value, str) and GO_DURATION.fullmatch(value), (name, value)


def test_services_have_health_checks_and_restart_policies(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in LONG_RUNNING:
        assert services[name]["restart"] in ("always", "unless-stopped"), name
        test = services[name]["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name
    # The topic-creating job runs once and must not be restarted after it succeeded.
    assert services["kafka-init"]["restart"] == "no"


def test_kafka_runs_in_kraft_mode_from_the_official_image(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node = env["KAFKA_NODE_ID"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{node}@kafka:")
    # KRaft needs a cluster id that is a base64url-encoded UUID (16 bytes -> 22 characters).
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", str(env["CLUSTER_ID"]))
    assert "zookeeper" not in json.dumps(compose).lower()


def test_init_service_creates_the_topics_the_app_expects(compose: dict[str, Any]) -> None:
    init = compose["services"]["kafka-init"]
    script = "\n".join(init["command"]) if isinstance(init["command"], list) else init["command"]
    created = {
        name: int(partitions)
        for name, partitions in re.findall(
            r"^\s*create\s+(\S+)\s+(\d+)(?:\s+--config\s+\S+)*\s*$", script, re.M
        )
    }
    assert created == EXPECTED_TOPICS
    # the releases topic is the budget journal: it must never expire
    assert re.search(r"create\s+releases\s+1\s+.*--config retention\.ms=-1", script)
    assert re.search(r"create\s+priors\s+1\s+.*--config retention\.ms=-1", script)
    assert re.search(r"create\s+pufferfish-tree-nodes\s+1\s+.*--config retention\.ms=-1", script)
    assert "--if-not-exists" in script and "kafka-topics.sh" in script
    assert init["depends_on"]["kafka"]["condition"] == "service_healthy"
    # ... and the worker's settings name exactly these topics with these partition counts.
    worker_settings = _worker_settings(compose)
    assert wanted_topics(worker_settings) == EXPECTED_TOPICS


def _worker_settings(compose: dict[str, Any]) -> Settings:
    env = compose["services"]["worker"]["environment"]
    assert all(k.startswith("PUFFERFISH_") for k in env)
    return settings_from_env(env)


def test_worker_environment_is_a_valid_configuration(compose: dict[str, Any]) -> None:
    settings = _worker_settings(compose)
    host, port = settings.bootstrap.split(":")
    assert host == "kafka" and int(port) == 9092
    # Prometheus must reach the metrics endpoint over the compose network.
    assert settings.metrics_host == "0.0.0.0" and settings.metrics_port == 9102


def test_workers_are_two_replicas_of_the_built_image(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    assert worker["deploy"]["replicas"] == 2
    assert "container_name" not in worker and "ports" not in worker  # would break replicas
    build = worker["build"]
    assert build["context"] == "." and (ROOT / build["dockerfile"]).is_file()
    assert worker["depends_on"]["kafka-init"]["condition"] == "service_completed_successfully"


def test_prometheus_scrapes_the_worker_service(compose: dict[str, Any]) -> None:
    prom_config = load_yaml(ROOT / "deploy" / "prometheus" / "prometheus.yml")
    job = next(j for j in prom_config["scrape_configs"] if j["job_name"] == "pufferfish")
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == ["worker"] and "worker" in compose["services"]
    settings = _worker_settings(compose)
    assert sd["port"] == settings.metrics_port
    volumes = compose["services"]["prometheus"]["volumes"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in volumes
    assert "--config.file=/etc/prometheus/prometheus.yml" in compose["services"]["prometheus"][
        "command"]


def test_published_ports_bind_loopback_only(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_init_script_is_valid_bash(compose: dict[str, Any], tmp_path: Path) -> None:
    init = compose["services"]["kafka-init"]
    assert init["entrypoint"] == ["/bin/bash", "-c"]
    (script,) = init["command"]
    # Compose turns `$$` into `$`; a lone `$` would be interpolated by compose itself.
    assert re.search(r"(?<!\$)\$(?!\$)", script) is None, "unescaped $ in the init script"
    path = tmp_path / "init.sh"
    path.write_text(script.replace("$$", "$"), encoding="utf-8")
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_bind_mount_sources_exist(compose: dict[str, Any]) -> None:
    named = set(compose.get("volumes", {}))
    for name, service in compose["services"].items():
        for spec in service.get("volumes", []):
            source = spec.split(":", 1)[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), (name, source)
            else:
                assert source in named, (name, source)


def test_dockerfile_exposes_the_metrics_port_prometheus_scrapes(compose: dict[str, Any]) -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    port = _worker_settings(compose).metrics_port
    assert re.search(rf"^EXPOSE\s+{port}\s*$", text, re.M)
    assert f"PUFFERFISH_METRICS_PORT={port}" in text
    assert compose["services"]["worker"]["expose"] == [str(port)]


def test_workers_keep_data_dir_on_a_named_volume(compose: dict[str, Any]) -> None:
    data_dir = settings_from_env(
        {k: v for k, v in compose_worker_env(compose).items() if k.startswith("PUFFERFISH_")}
    ).data_dir
    assert data_dir.is_absolute()  # not relative to whatever WORKDIR the image has
    # short syntax SOURCE:TARGET[:MODE] -> {target: (source, mode)}
    mounts = {parts[1]: (parts[0], parts[2:]) for parts in
              (spec.split(":") for spec in compose["services"]["worker"].get("volumes", []))}
    assert str(data_dir) in mounts, f"no volume on data_dir {data_dir}"
    source, mode = mounts[str(data_dir)]
    assert "ro" not in mode
    assert not source.startswith((".", "/")), "a named volume, not a bind mount"
    assert source in compose["volumes"]


def test_workers_keep_their_users_on_disk_with_a_standby(compose: dict[str, Any]) -> None:
    """The shipped stack runs the RocksDB store (the image has rocksdict: test_dockerfile.py)
    on the data_dir volume above, each worker a standby of the other's partitions."""
    settings = _worker_settings(compose)
    assert settings.store == "rocksdb://"
    assert 1 <= settings.table_standby_replicas < compose["services"]["worker"]["deploy"][
        "replicas"]
