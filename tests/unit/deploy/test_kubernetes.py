"""deploy/kubernetes: every kustomization renders, every object fits its schema (the Kubernetes
API's, KEDA's, the Prometheus operator's), and the manifests keep the promises docs/deploy.md
makes: restricted pods, probes on the probes port, drains matched to the processes, KEDA
triggers that name Tideway's real stream, consumer and queue."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.config import ConsumerSettings, WorkerSettings
from streams.names import Names
from tests.shared_data import REPO_ROOT
from tests.unit.deploy.manifests import KUBERNETES, Manifest, problems, render

KUSTOMIZATIONS = sorted(p.parent for p in KUBERNETES.rglob("kustomization.yaml"))
OVERLAY = KUBERNETES / "overlays" / "example"
PROCESSES = ("ingest", "intake", "worker", "api")
IMAGE_UID = 10001

# The trigger metadata each KEDA scaler reads (keda.sh/docs/scalers: nats-jetstream,
# postgresql); the CRD types `metadata` as a free map, so a misspelling would pass it.
NATS_JETSTREAM_KEYS = {
    "natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold",
    "activationLagThreshold", "useHttps",
}
POSTGRESQL_KEYS = {
    "query", "targetQueryValue", "activationTargetQueryValue", "connectionFromEnv", "host",
    "port", "userName", "dbName", "sslmode", "passwordFromEnv",
}
POSTGRESQL_AUTH_PARAMETERS = {"connection", "password", "host", "port", "userName", "dbName",
                              "sslmode"}


@pytest.fixture(scope="module")
def rendered() -> dict[Path, list[Manifest]]:
    return {k: render(k) for k in KUSTOMIZATIONS}


@pytest.fixture(scope="module")
def overlay(rendered: dict[Path, list[Manifest]]) -> list[Manifest]:
    return rendered[OVERLAY]


def _one(objs: list[Manifest], kind: str, name: str) -> Manifest:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _of(objs: list[Manifest], kind: str) -> list[Manifest]:
    return [o for o in objs if o["kind"] == kind]


def _pod_specs(objs: list[Manifest]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"])
            for o in objs if o["kind"] in ("Deployment", "Job")]


def _config(objs: list[Manifest]) -> dict[str, str]:
    (config,) = [o for o in _of(objs, "ConfigMap") if o["metadata"]["name"].startswith(
        "tideway-config")]
    data: dict[str, str] = config["data"]
    return data


def test_the_expected_kustomizations_exist() -> None:
    assert {k.relative_to(KUBERNETES).as_posix() for k in KUSTOMIZATIONS} == {
        "base", "base/release", "overlays/example", "overlays/example/release",
    }


def test_every_rendered_object_fits_its_schema(rendered: dict[Path, list[Manifest]]) -> None:
    found = {}
    for kustomization, objs in rendered.items():
        assert objs, kustomization
        for obj in objs:
            where = f"{kustomization.relative_to(REPO_ROOT)}: {obj['kind']}/" \
                    f"{obj['metadata']['name']}"
            found[where] = problems(obj)
    assert {k: v for k, v in found.items() if v} == {}
    kinds = {w.split(": ")[1].split("/")[0] for w in found}
    assert {"Deployment", "Job", "ScaledObject", "TriggerAuthentication",
            "ServiceMonitor", "PodDisruptionBudget", "Service", "ConfigMap", "Secret"} <= kinds


def test_the_validators_are_strict(overlay: list[Manifest]) -> None:
    # Not vacuous: a misspelled field, a wrong type and an unknown field are each caught, in a
    # built-in kind and in each custom resource kind.
    deployment = copy.deepcopy(_one(overlay, "Deployment", "tideway-ingest"))
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 45
    assert any("terminationGracePeriod" in p for p in problems(deployment))
    deployment = copy.deepcopy(_one(overlay, "Deployment", "tideway-ingest"))
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "x"
    assert problems(deployment)
    scaled = copy.deepcopy(_one(overlay, "ScaledObject", "tideway-ingest"))
    scaled["spec"]["pollingIntervall"] = 15
    assert any("pollingIntervall" in p for p in problems(scaled))
    scaled = copy.deepcopy(_one(overlay, "ScaledObject", "tideway-ingest"))
    scaled["spec"]["minReplicaCount"] = "1"
    assert any("minReplicaCount" in p for p in problems(scaled))
    auth = copy.deepcopy(_one(overlay, "TriggerAuthentication", "tideway-postgres"))
    auth["spec"]["secretTargetRef"][0]["secret"] = "x"
    assert any("secret" in p for p in problems(auth))
    monitor = copy.deepcopy(_one(overlay, "ServiceMonitor", "tideway"))
    monitor["spec"]["endpoints"][0]["scrapeInterval"] = "15s"
    assert any("scrapeInterval" in p for p in problems(monitor))


def test_every_pod_is_restricted(overlay: list[Manifest]) -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert re.search(rf"^USER {IMAGE_UID}(:{IMAGE_UID})?$", dockerfile, re.MULTILINE)
    specs = _pod_specs(overlay)
    assert len(specs) == 6  # four processes, two release Jobs
    for where, spec in specs:
        assert spec["securityContext"] == {
            "runAsNonRoot": True, "runAsUser": IMAGE_UID, "runAsGroup": IMAGE_UID,
            "fsGroup": IMAGE_UID, "seccompProfile": {"type": "RuntimeDefault"},
        }, where
        assert spec["automountServiceAccountToken"] is False, where
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert "emptyDir" in volumes["tmp"], where
        for container in spec.get("initContainers", []) + spec["containers"]:
            name = f"{where} {container['name']}"
            assert container["securityContext"] == {
                "runAsNonRoot": True, "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
            }, name
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], name
            resources = container["resources"]
            assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
            assert [e for e in container["envFrom"]] == [
                {"configMapRef": {"name": _config_name(overlay)}},
                {"secretRef": {"name": _secret_name(overlay)}},
            ], name
    namespace = _one(overlay, "Namespace", "tideway")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def _config_name(objs: list[Manifest]) -> str:
    return str(next(o["metadata"]["name"] for o in _of(objs, "ConfigMap")))


def _secret_name(objs: list[Manifest]) -> str:
    return str(next(o["metadata"]["name"] for o in _of(objs, "Secret")))


def test_probes_serve_on_the_configured_port(overlay: list[Manifest]) -> None:
    config = _config(overlay)
    port = int(config["TIDEWAY_OBSERVABILITY__METRICS_PORT"])
    assert config["TIDEWAY_OBSERVABILITY__HOST"] == "0.0.0.0"  # reachable by the kubelet
    for process in PROCESSES:
        spec = _one(overlay, "Deployment", f"tideway-{process}")["spec"]["template"]["spec"]
        (main,) = spec["containers"]
        assert main["args"][0] == process
        assert {"name": "probes", "containerPort": port} in main["ports"]
        for probe, path in (("startupProbe", "/livez"), ("livenessProbe", "/livez"),
                            ("readinessProbe", "/readyz")):
            assert main[probe]["httpGet"] == {"path": path, "port": "probes"}, (process, probe)
        service = _one(overlay, "Service", f"tideway-{process}")
        assert {"name": "probes", "port": port, "targetPort": "probes"} in service["spec"][
            "ports"]
        assert service["spec"]["selector"] == spec_labels(overlay, process)
    api = _one(overlay, "Service", "tideway-api")
    assert {"name": "http", "port": int(config["TIDEWAY_API__PORT"]), "targetPort": "http"} in \
        api["spec"]["ports"]


def spec_labels(objs: list[Manifest], process: str) -> dict[str, str]:
    deployment = _one(objs, "Deployment", f"tideway-{process}")
    labels: dict[str, str] = deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["template"]["metadata"]["labels"] == labels
    return labels


def test_every_process_is_scraped(overlay: list[Manifest]) -> None:
    monitor = _one(overlay, "ServiceMonitor", "tideway")
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = [s for s in _of(overlay, "Service")
               if selector.items() <= s["metadata"]["labels"].items()]
    assert {s["metadata"]["name"] for s in scraped} == {f"tideway-{p}" for p in PROCESSES}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    for service in scraped:
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    # Release Job pods serve no probes: no Service selects them.
    for job in _of(overlay, "Job"):
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert not any(s["spec"]["selector"].items() <= labels.items() for s in scraped)


def test_every_process_has_a_disruption_budget(overlay: list[Manifest]) -> None:
    for process in PROCESSES:
        budget = _one(overlay, "PodDisruptionBudget", f"tideway-{process}")
        assert budget["spec"]["selector"]["matchLabels"] == spec_labels(overlay, process)
        assert budget["spec"]["maxUnavailable"] == 1


def test_grace_periods_cover_each_drain(overlay: list[Manifest]) -> None:
    def grace(process: str) -> int:
        deployment = _one(overlay, "Deployment", f"tideway-{process}")
        return int(deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])

    # A worker drains: its running jobs get worker.drain_s, then are stopped and requeued.
    drain = WorkerSettings().drain_s
    assert drain < grace("worker") <= drain + 60
    # Ingest finishes its in-flight batches; past ack_wait they are redelivered anyway.
    ack_wait = ConsumerSettings().ack_wait_s
    assert ack_wait < grace("ingest") <= ack_wait + 30
    assert grace("intake") >= 30
    api = _one(overlay, "Deployment", "tideway-api")["spec"]["template"]["spec"]
    pre_stop = int(api["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][1])
    assert grace("api") > pre_stop


def test_ingest_scales_on_the_real_consumer(overlay: list[Manifest]) -> None:
    scaled = _one(overlay, "ScaledObject", "tideway-ingest")
    assert scaled["spec"]["scaleTargetRef"] == {"name": "tideway-ingest"}
    assert "replicas" not in _one(overlay, "Deployment", "tideway-ingest")["spec"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "nats-jetstream"
    metadata = trigger["metadata"]
    assert set(metadata) <= NATS_JETSTREAM_KEYS
    assert {"natsServerMonitoringEndpoint", "account", "stream", "consumer",
            "lagThreshold"} <= set(metadata)
    names = Names()  # production: no namespace prefix
    assert (metadata["stream"], metadata["consumer"]) == (names.telemetry_stream,
                                                          names.ingest_durable)
    assert metadata["account"] == "$G"
    assert int(metadata["lagThreshold"]) > 0
    consumer = ConsumerSettings()
    in_flight_per_pod = consumer.batch_size * consumer.concurrency
    assert scaled["spec"]["maxReplicaCount"] <= -(-consumer.max_ack_pending // in_flight_per_pod)


def test_workers_scale_on_the_job_queue(overlay: list[Manifest]) -> None:
    scaled = _one(overlay, "ScaledObject", "tideway-worker")
    assert scaled["spec"]["scaleTargetRef"] == {"name": "tideway-worker"}
    assert "replicas" not in _one(overlay, "Deployment", "tideway-worker")["spec"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    assert set(trigger["metadata"]) <= POSTGRESQL_KEYS
    assert {"query", "targetQueryValue"} <= set(trigger["metadata"])
    assert float(trigger["metadata"]["targetQueryValue"]) == WorkerSettings().concurrency
    auth = _one(overlay, "TriggerAuthentication", trigger["authenticationRef"]["name"])
    (ref,) = auth["spec"]["secretTargetRef"]
    assert ref["parameter"] in POSTGRESQL_AUTH_PARAMETERS
    secret = _one(overlay, "Secret", ref["name"])  # the generated name, hash suffix included
    assert ref["key"] == "TIDEWAY_POSTGRES_DSN" and ref["key"] in secret["data"]


def test_release_jobs_are_named_after_the_image(overlay: list[Manifest]) -> None:
    (image,) = {c["image"] for _, spec in _pod_specs(overlay)
                for c in spec.get("initContainers", []) + spec["containers"]}
    tag = image.rsplit(":", 1)[1]
    suffix = "-" + tag.replace(".", "-")
    assert {j["metadata"]["name"] for j in _of(overlay, "Job")} == {
        f"tideway-migrate{suffix}", f"tideway-streams-init{suffix}"}
    commands = {j["metadata"]["name"]: j["spec"]["template"]["spec"]["containers"][0]["args"]
                for j in _of(overlay, "Job")}
    assert commands == {f"tideway-migrate{suffix}": ["migrate"],
                        f"tideway-streams-init{suffix}": ["streams", "init"]}


def test_new_pods_wait_for_the_migration(overlay: list[Manifest]) -> None:
    scripts = set()
    for process in PROCESSES:
        spec = _one(overlay, "Deployment", f"tideway-{process}")["spec"]["template"]["spec"]
        (wait,) = spec["initContainers"]
        assert wait["name"] == "wait-for-schema" and wait["command"][:2] == ["python", "-c"]
        scripts.add(wait["command"][2])
    (script,) = scripts  # one script, copied into each Deployment
    compile(script, "wait-for-schema", "exec")
    # tests/integration/deploy runs it against Postgres; here: the names it uses exist.
    from streams import migrate
    from streams.config import load_settings

    assert callable(migrate.current) and callable(migrate.head) and callable(load_settings)


def test_base_config_is_complete() -> None:
    base = yaml.safe_load((KUBERNETES / "base" / "kustomization.yaml").read_text())
    (generator,) = base["configMapGenerator"]
    keys = {literal.split("=", 1)[0] for literal in generator["literals"]}
    assert {"TIDEWAY_OBSERVABILITY__HOST", "TIDEWAY_OBSERVABILITY__METRICS_PORT",
            "TIDEWAY_API__HOST", "TIDEWAY_DATA_DIR", "TIDEWAY_OBJECT_STORE"} <= keys
    secrets = (OVERLAY / "secrets.env").read_text()
    for key in ("TIDEWAY_NATS_URL", "TIDEWAY_POSTGRES_DSN", "TIDEWAY_REDIS_URL",
                "TIDEWAY_CLICKHOUSE_DSN"):
        assert re.search(rf"^{key}=\S+$", secrets, re.MULTILINE), key
        assert key not in keys  # URLs carry passwords: Secret only
