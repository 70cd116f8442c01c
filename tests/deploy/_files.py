"""Readers for the deploy files and the checks their tests share."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose" / "compose.yaml"
K8S_BASE = DEPLOY / "k8s" / "base"
COMPOSE_SCHEMA = ROOT / "tests" / "fixtures" / "schemas" / "compose-spec.json"


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def compose_errors(doc: dict[str, Any]) -> list[str]:
    """What the Compose Specification schema says is wrong with `doc` (empty: valid)."""
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(doc)]


def kustomization() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text())
    return data


def k8s_resources() -> Iterator[tuple[str, dict[str, Any]]]:
    """(file, resource) for every resource the kustomization lists, in order."""
    for name in kustomization()["resources"]:
        for doc in yaml.safe_load_all((K8S_BASE / name).read_text()):
            if doc is not None:
                yield name, doc


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [r for _, r in k8s_resources() if r["kind"] == kind]


def pod_specs() -> list[tuple[str, dict[str, Any]]]:
    """(workload name, pod spec) of every Deployment and DaemonSet."""
    return [
        (r["metadata"]["name"], r["spec"]["template"]["spec"])
        for _, r in k8s_resources()
        if r["kind"] in ("Deployment", "DaemonSet")
    ]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())
