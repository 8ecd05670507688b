"""Render the kustomizations under ``deploy/kubernetes`` and check each object against a schema.

Rendering uses ``kubectl kustomize`` (kustomize v5 built into kubectl): neither PyPI nor Debian
ships kustomize, and a hand-written renderer would test itself rather than what ``kubectl
apply -k`` does. Without kubectl the tests skip locally and fail under ``CI=true``.

Schemas:

* built-in kinds: ``kubernetes-validate`` (the Kubernetes OpenAPI schemas as JSON Schema,
  bundled, so it works offline) in strict mode, which rejects fields the API does not have;
* KEDA's ``ScaledObject``/``TriggerAuthentication`` and the Prometheus operator's
  ``ServiceMonitor``: kubernetes-validate has no CRDs, so these go through the cloudcoil model
  packages, pydantic models generated from each project's published CRD YAML. A model ignores
  unknown fields and coerces types, so :func:`crd_problems` also compares the object with the
  model's dump of it: anything dropped (a misspelled or unknown field) or changed (a string
  where the CRD wants a number) is reported. What neither schema checks — a scaler's
  ``metadata`` keys, which the CRD types as a free string map — the tests check against the
  keys each KEDA scaler reads.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pydantic
import yaml
from cloudcoil.models.keda.v1alpha1 import ScaledObject, TriggerAuthentication
from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor

from tests.shared_data import REPO_ROOT, skip_or_fail

KUBERNETES = REPO_ROOT / "deploy" / "kubernetes"
#: The oldest Kubernetes the manifests promise to work on, and the newest the validator knows.
KUBERNETES_VERSIONS = ("1.30", kubernetes_validate.utils.latest_version())

CRD_MODELS: dict[tuple[str, str], type[pydantic.BaseModel]] = {
    ("keda.sh/v1alpha1", "ScaledObject"): ScaledObject,
    ("keda.sh/v1alpha1", "TriggerAuthentication"): TriggerAuthentication,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ServiceMonitor,
}

Manifest = dict[str, Any]


def render(kustomization: Path) -> list[Manifest]:
    """``kubectl kustomize <kustomization>`` as a list of objects."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        skip_or_fail("kubectl (which renders kustomizations) is not installed")
        raise AssertionError("unreachable")
    done = subprocess.run(
        [kubectl, "kustomize", str(kustomization)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def core_problems(obj: Manifest) -> list[str]:
    """Where ``obj`` (a built-in kind) breaks the Kubernetes schema of each supported version."""
    problems = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            problems.append(f"Kubernetes {version}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"Kubernetes {version}: {exc.message}")
    return problems


def crd_problems(obj: Manifest) -> list[str]:
    """Where ``obj`` (a KEDA or Prometheus operator object) breaks its CRD's schema."""
    model = CRD_MODELS[(obj["apiVersion"], obj["kind"])]
    try:
        parsed = model.model_validate(obj)
    except pydantic.ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    dumped = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return list(_differences(obj, dumped, ""))


def _differences(given: Any, kept: Any, path: str) -> list[str]:
    if isinstance(given, dict) and isinstance(kept, dict):
        found = [f"{path}.{key}: not a field of the CRD" for key in given if key not in kept]
        for key in given.keys() & kept.keys():
            found += _differences(given[key], kept[key], f"{path}.{key}")
        return found
    if isinstance(given, list) and isinstance(kept, list) and len(given) == len(kept):
        found = []
        for i, (g, k) in enumerate(zip(given, kept, strict=True)):
            found += _differences(g, k, f"{path}[{i}]")
        return found
    if given != kept or type(given) is not type(kept):
        return [f"{path}: {given!r} is not what the CRD takes (read as {kept!r})"]
    return []


def problems(obj: Manifest) -> list[str]:
    """Every schema problem of ``obj``, whichever kind it is."""
    if (obj.get("apiVersion"), obj.get("kind")) in CRD_MODELS:
        return crd_problems(obj)
    return core_problems(obj)
