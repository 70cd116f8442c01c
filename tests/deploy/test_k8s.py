"""deploy/k8s/base, checked statically: `kustomize build` emulated, Kubernetes schemas offline.

kustomize itself is not run (no binary here): the test checks what it would need, i.e. every
listed resource exists, nothing unlisted lies beside them, every resource validates against the
Kubernetes OpenAPI schemas (strict: unknown fields fail) shipped in the kubernetes-validate
wheel, and the references between resources (selectors, ConfigMaps, Secrets) hold.
"""

from __future__ import annotations

import os
from typing import Any

import kubernetes_validate
import pytest
import yaml

from rackplane.config import load_settings
from rackplane.importers import parse_cluster_file
from tests.deploy._files import (
    K8S_BASE,
    k8s_resources,
    kustomization,
    of_kind,
    pod_specs,
    selects,
)
from tests.deploy.test_compose_and_image import cli_commands, cli_errors

VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "namespace", "labels", "images", "resources"}
KAFKA_SECRETS = {
    "worker": "rackplane-kafka-worker",
    "exporter": "rackplane-kafka-exporter",
    "kube": "rackplane-kafka-client",
}
"""Each component's own Kafka principal (issue 16: the exporter on every GPU node must not
hold the workers' credentials; the Kubernetes adapter sends commands as a client does)."""


def named(kind: str, name: str) -> dict[str, Any]:
    (found,) = [r for r in of_kind(kind) if r["metadata"]["name"] == name]
    return found


def test_the_kustomization_lists_every_resource_file_and_only_those() -> None:
    k = kustomization()
    assert (k["apiVersion"], k["kind"]) == ("kustomize.config.k8s.io/v1beta1", "Kustomization")
    assert set(k) <= KUSTOMIZATION_KEYS, set(k) - KUSTOMIZATION_KEYS
    listed = set(k["resources"])
    present = {p.name for p in K8S_BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    assert {i["name"] for i in k["images"]} == {
        c["image"] for _, s in pod_specs() for c in s["containers"]
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_every_resource_validates_against_the_kubernetes_schemas(version: str) -> None:
    kinds = []
    for name, resource in k8s_resources():
        try:
            kubernetes_validate.validate(resource, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{name}: {resource['kind']} {err.path}: {err.message}")
        kinds.append(resource["kind"])
    want = {"Deployment", "DaemonSet", "ConfigMap", "NetworkPolicy", "PodDisruptionBudget"}
    assert want <= set(kinds)


def test_the_schema_check_catches_a_misplaced_field() -> None:
    deployment = named("Deployment", "rackplane-worker")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)


def test_selectors_pick_the_pods_of_their_workload() -> None:
    workloads = of_kind("Deployment") + of_kind("DaemonSet")
    pod_labels = [w["spec"]["template"]["metadata"]["labels"] for w in workloads]
    workers = [w["metadata"]["name"] == "rackplane-worker" for w in workloads]
    for w in workloads:
        assert selects(
            w["spec"]["selector"]["matchLabels"], w["spec"]["template"]["metadata"]["labels"]
        )
    (pdb,) = of_kind("PodDisruptionBudget")
    (service,) = of_kind("Service")
    for selector in (pdb["spec"]["selector"]["matchLabels"], service["spec"]["selector"]):
        assert [selects(selector, labels) for labels in pod_labels] == workers
    for policy in of_kind("NetworkPolicy"):
        selector = policy["spec"]["podSelector"]["matchLabels"]
        assert any(selects(selector, labels) for labels in pod_labels)


def test_the_exporter_runs_on_gpu_nodes_and_scrapes_dcgm_on_its_node() -> None:
    (daemonset,) = of_kind("DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    (container,) = spec["containers"]
    assert container["args"][:4] == [
        "exporter",
        "dcgm",
        "--scrape",
        "http://$(NODE_IP):9400/metrics",
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"


def test_pods_are_locked_down_and_take_kafka_credentials_from_their_own_secret() -> None:
    known = cli_commands()
    for name, spec in pod_specs():
        kube = name == "rackplane-kube"  # the adapter alone talks to the API server
        assert spec["automountServiceAccountToken"] is kube
        assert spec["serviceAccountName"] == ("rackplane-kube" if kube else "rackplane")
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in spec["containers"]:
            assert c["args"][0] in known, f"{name}: rackplane has no command {c['args'][0]!r}"
            assert cli_errors(c["args"]) is None, f"{name}: {cli_errors(c['args'])}"
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
            assert sc["capabilities"]["drop"] == ["ALL"]
            env = {e["name"]: e for e in c["env"]}
            secret = KAFKA_SECRETS[c["args"][0]]
            password = env["RACKPLANE_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
            assert password == {"name": secret, "key": "password"}
            user = env["RACKPLANE_KAFKA_SASL_USERNAME"]["valueFrom"]["secretKeyRef"]
            assert user == {"name": secret, "key": "username"}
            assert "value" not in env["RACKPLANE_KAFKA_SASL_PASSWORD"]
            secrets = {
                v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v
            }
            if c["args"][0] == "worker":  # its views bind 0.0.0.0: a token from a Secret
                token = env["RACKPLANE_WEB_TOKEN"]["valueFrom"]["secretKeyRef"]
                assert token == {"name": "rackplane-web", "key": "token"}
                # It signs the policies' commands with a key from its own Secret, read-only.
                (mount,) = [m for m in c["volumeMounts"] if m["name"] in secrets]
                assert secrets[mount["name"]] == "rackplane-worker-key" and mount["readOnly"]
                key_file = env["RACKPLANE_WORKER_KEY_FILE"]["value"]
                assert key_file.startswith(mount["mountPath"] + "/")
            elif c["args"][0] == "kube":  # it signs its commands with a key of its own
                assert "RACKPLANE_WEB_TOKEN" not in env, f"{name} needs no web token"
                (mount,) = [m for m in c["volumeMounts"] if m["name"] in secrets]
                assert secrets[mount["name"]] == "rackplane-kube-key" and mount["readOnly"]
                assert env["RACKPLANE_KEY_FILE"]["value"].startswith(mount["mountPath"] + "/")
            else:
                assert "RACKPLANE_WEB_TOKEN" not in env, f"{name} needs no web token"
                assert not secrets, f"{name} mounts no key: only workers sign as policies"


def test_mounted_config_maps_exist_and_hold_a_valid_config_and_cluster_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    maps = {m["metadata"]["name"]: m for m in of_kind("ConfigMap")}
    for name, spec in pod_specs():
        for volume in spec["volumes"]:
            if "configMap" in volume:
                assert volume["configMap"]["name"] in maps, name
    data = maps["rackplane-config"]["data"]
    cluster = parse_cluster_file(data["cluster.yaml"], source="configmap.yaml:cluster.yaml")
    assert cluster.policy.admins
    config = tmp_path / "rackplane.yaml"
    config.write_text(data["rackplane.yaml"])
    for var in list(os.environ):
        if var.startswith("RACKPLANE_"):
            monkeypatch.delenv(var)
    # What the Secret provides through secretKeyRef:
    monkeypatch.setenv("RACKPLANE_KAFKA_SASL_USERNAME", "rackplane")
    monkeypatch.setenv("RACKPLANE_KAFKA_SASL_PASSWORD", "from-the-secret")
    settings = load_settings(config).settings
    assert "RACKPLANE_WEB_TOKEN" in str(settings.stream_config().web_problem())  # no Secret
    monkeypatch.setenv("RACKPLANE_WEB_TOKEN", "from-the-rackplane-web-secret")
    settings = load_settings(config).settings
    assert settings.stream_config().web_problem() is None
    assert settings.kafka_security_protocol == "SASL_SSL"
    assert settings.replication == 3
    deployment = named("Deployment", "rackplane-worker")
    assert deployment["spec"]["replicas"] <= settings.partitions
    kube = named("Deployment", "rackplane-kube")["spec"]["template"]["spec"]["containers"][0]
    assert kube["args"][:3] == ["kube", "--cluster", cluster.topology.cluster]
    assert yaml.safe_load(data["rackplane.yaml"])  # a mapping, not a string


def test_the_workers_probes_ask_the_worker_whether_it_is_alive_and_ready() -> None:
    (spec,) = [s for name, s in pod_specs() if "worker" in name]
    (worker,) = spec["containers"]
    assert worker["livenessProbe"]["httpGet"]["path"] == "/health"
    assert worker["startupProbe"]["httpGet"]["path"] == "/health"
    assert worker["readinessProbe"]["httpGet"]["path"] == "/ready"


def test_the_adapter_may_read_nodes_pods_groups_budgets_bind_evict_create_and_patch() -> None:
    role = named("ClusterRole", "rackplane-kube")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        ("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "watch"),
        ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "create"),
        ("", "pods", "patch"), ("", "pods/binding", "create"), ("", "pods/eviction", "create"),
        ("scheduling.k8s.io", "podgroups", "get"), ("scheduling.k8s.io", "podgroups", "list"),
        ("scheduling.k8s.io", "podgroups", "watch"),
        *((group, "podgroups", verb)
          for group in ("scheduling.volcano.sh", "scheduling.run.ai", "scheduling.x-k8s.io")
          for verb in ("get", "list", "watch")),
        ("policy", "poddisruptionbudgets", "get"),
        ("policy", "poddisruptionbudgets", "list"), ("policy", "poddisruptionbudgets", "watch"),
    }  # fmt: skip
    binding = named("ClusterRoleBinding", "rackplane-kube")
    assert binding["roleRef"]["name"] == "rackplane-kube"
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "rackplane-kube",
            "namespace": kustomization()["namespace"],
        }
    ]
    deployment = named("Deployment", "rackplane-kube")
    assert (
        deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    )
    policy = named("NetworkPolicy", "rackplane-kube")
    ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert ports == {53, 9092, 9093, 443, 6443}
