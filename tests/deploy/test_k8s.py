"""deploy/k8s: the manifests parse and refer to each other by consistent names."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.support import K8S, load_yaml_documents, settings_from_env

# module-scoped fixtures below: one worker process runs this module (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("test_k8s")


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    files = sorted(K8S.glob("*.yaml"))
    assert files
    for path in files:
        for doc in load_yaml_documents(path):
            assert {"apiVersion", "kind", "metadata"} <= set(doc), path
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in found, f"{key} defined twice"
            found[key] = doc
    return found


def _workers(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    found: list[dict[str, Any]] = [o for (k, _), o in objects.items() if k == "StatefulSet"]
    (sts,) = found
    return sts


def _container(sts: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = sts["spec"]["template"]["spec"]["containers"]
    (container,) = containers
    return container


def test_statefulset_selects_its_own_pods_and_names_its_service(objects: Any) -> None:
    sts = _workers(objects)
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = objects[("Service", sts["spec"]["serviceName"])]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["clusterIP"] == "None"  # headless: stable per-pod names
    assert sts["spec"]["replicas"] >= 2


def test_service_and_probes_use_declared_container_ports(objects: Any) -> None:
    sts = _workers(objects)
    container = _container(sts)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    service = objects[("Service", sts["spec"]["serviceName"])]
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in ports
    annotations = service["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == ports["metrics"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        http = container[probe]["httpGet"]
        assert http["port"] in ports and http["path"] == "/metrics", probe


def test_resources_have_requests_and_limits(objects: Any) -> None:
    resources = _container(_workers(objects))["resources"]
    for kind in ("cpu", "memory"):
        assert kind in resources["requests"] and kind in resources["limits"]


def test_env_comes_from_existing_configmap_and_secret(objects: Any) -> None:
    env_from = _container(_workers(objects))["envFrom"]
    refs = {("ConfigMap" if "configMapRef" in e else "Secret"):
            (e.get("configMapRef") or e["secretRef"])["name"] for e in env_from}
    assert set(refs) == {"ConfigMap", "Secret"}
    for kind, name in refs.items():
        assert (kind, name) in objects, (kind, name)
    secret = objects[("Secret", refs["Secret"])]
    # Kafka location and credentials come from the Secret, not the ConfigMap.
    assert {"PUFFERFISH_BROKER", "PUFFERFISH_SASL_PASSWORD"} <= set(secret["stringData"])
    config = objects[("ConfigMap", refs["ConfigMap"])]
    assert not {k for k in config["data"] if "PASSWORD" in k or k == "PUFFERFISH_BROKER"}


def test_configmap_plus_secret_is_a_valid_configuration(objects: Any) -> None:
    env_from = _container(_workers(objects))["envFrom"]
    env: dict[str, str] = {}
    for entry in env_from:
        if "configMapRef" in entry:
            env.update(objects[("ConfigMap", entry["configMapRef"]["name"])]["data"])
        else:
            env.update(objects[("Secret", entry["secretRef"]["name"])]["stringData"])
    settings = settings_from_env(env)
    assert settings.broker_security_protocol == "SASL_SSL"
    assert settings.metrics_port == _container(_workers(objects))["ports"][0]["containerPort"]
    # The CA file the Secret names lies inside the mounted TLS secret volume.
    mounts = {m["name"]: m["mountPath"] for m in _container(_workers(objects))["volumeMounts"]}
    assert str(settings.ssl_cafile).startswith(mounts["kafka-tls"] + "/")
    assert str(settings.data_dir) == mounts["data"]


def test_volumes_are_declared(objects: Any) -> None:
    sts = _workers(objects)
    pod = sts["spec"]["template"]["spec"]
    declared = {v["name"] for v in pod["volumes"]} | {
        c["metadata"]["name"] for c in sts["spec"].get("volumeClaimTemplates", [])}
    for mount in _container(sts)["volumeMounts"]:
        assert mount["name"] in declared, mount


def test_runs_as_the_image_user_without_privileges(objects: Any) -> None:
    sts = _workers(objects)
    pod_security = sts["spec"]["template"]["spec"]["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    container_security = _container(sts)["securityContext"]
    assert container_security["allowPrivilegeEscalation"] is False
