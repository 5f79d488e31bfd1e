"""deploy/k8s: the manifests parse and refer to each other by consistent names.

deploy/k8s/ is what `kubectl apply -f deploy/k8s/` applies; the example Secret (placeholder
credentials) lives apart in deploy/k8s-examples/ and is never part of that set.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.manifests import K8S_EXAMPLES, k8s_objects, manifest_files, secret_data
from tests.deploy.support import K8S, ROOT, settings_from_env

# module-scoped fixtures below: one worker process runs this module (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("test_k8s")


@pytest.fixture(scope="module")
def applied() -> dict[tuple[str, str], dict[str, Any]]:
    """What `kubectl apply -f deploy/k8s/` applies (-R included: every file below it)."""
    return k8s_objects(K8S)


@pytest.fixture(scope="module")
def examples() -> dict[tuple[str, str], dict[str, Any]]:
    return k8s_objects(K8S_EXAMPLES)


@pytest.fixture(scope="module")
def objects(
    applied: dict[tuple[str, str], dict[str, Any]],
    examples: dict[tuple[str, str], dict[str, Any]],
) -> dict[tuple[str, str], dict[str, Any]]:
    """The applied set plus the example Secret an operator creates from deploy/k8s-examples."""
    assert not set(applied) & set(examples), "an object both applied and an example"
    return {**applied, **examples}


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
    assert {"PUFFERFISH_BROKER", "PUFFERFISH_SASL_PASSWORD"} <= set(secret_data(secret))
    config = objects[("ConfigMap", refs["ConfigMap"])]
    assert not {k for k in config["data"] if "PASSWORD" in k or k == "PUFFERFISH_BROKER"}


def test_configmap_plus_secret_is_a_valid_configuration(objects: Any) -> None:
    env_from = _container(_workers(objects))["envFrom"]
    env: dict[str, str] = {}
    for entry in env_from:
        if "configMapRef" in entry:
            env.update(objects[("ConfigMap", entry["configMapRef"]["name"])]["data"])
        else:
            env.update(secret_data(objects[("Secret", entry["secretRef"]["name"])]))
    settings = settings_from_env(env)
    assert settings.broker_security_protocol == "SASL_SSL"
    assert settings.metrics_port == _container(_workers(objects))["ports"][0]["containerPort"]
    # The CA file the Secret names lies inside the mounted TLS secret volume.
    mounts = {m["name"]: m["mountPath"] for m in _container(_workers(objects))["volumeMounts"]}
    assert str(settings.ssl_cafile).startswith(mounts["kafka-tls"] + "/")
    assert str(settings.data_dir) == mounts["data"]


def test_workers_keep_their_users_on_a_claim_with_a_standby(objects: Any) -> None:
    """The RocksDB store (the image has rocksdict: test_dockerfile.py) under data_dir, which
    is each pod's own claim (not an emptyDir: it outlives the pod), one standby per partition."""
    sts = _workers(objects)
    env = objects[("ConfigMap", "pufferfish-config")]["data"]
    settings = settings_from_env({k: v for k, v in env.items()})
    assert settings.store == "rocksdb://"
    assert 1 <= settings.table_standby_replicas < sts["spec"]["replicas"]
    (mount,) = [m for m in _container(sts)["volumeMounts"] if m["mountPath"] == str(
        settings.data_dir)]
    claims = {c["metadata"]["name"] for c in sts["spec"]["volumeClaimTemplates"]}
    assert mount["name"] in claims and not mount.get("readOnly")


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


def test_the_apply_set_holds_no_secret(applied: Any) -> None:
    kinds = {kind for kind, _ in applied}
    assert "Secret" not in kinds, "placeholder credentials would be applied"
    for path in manifest_files(K8S):
        assert "REPLACE_ME" not in path.read_text(encoding="utf-8"), path


def test_the_example_secret_is_the_one_the_workers_read(applied: Any, examples: Any) -> None:
    env_from = _container(_workers(applied))["envFrom"]
    (name,) = [e["secretRef"]["name"] for e in env_from if "secretRef" in e]
    assert ("Secret", name) in examples
    assert {kind for kind, _ in examples} == {"Secret"}
    # the examples are not below deploy/k8s (`kubectl apply -R -f deploy/k8s/` misses them too)
    assert not K8S_EXAMPLES.resolve().is_relative_to(K8S.resolve())


def test_the_apply_set_check_sees_a_secret(tmp_path: Any) -> None:
    (tmp_path / "a.yaml").write_text(
        (K8S_EXAMPLES / "secret.example.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    assert ("Secret", "pufferfish-kafka") in k8s_objects(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.json").write_text(
        '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}', encoding="utf-8")
    assert ("ConfigMap", "x") in k8s_objects(tmp_path)


def test_no_file_names_the_secret_at_its_old_place() -> None:
    old = "deploy/k8s/secret.example.yaml"
    for path in [*manifest_files(K8S), *manifest_files(K8S_EXAMPLES),
                 ROOT / "deploy" / "README.md", ROOT / "docker-compose.yml"]:
        if path.is_file():
            assert old not in path.read_text(encoding="utf-8"), path
