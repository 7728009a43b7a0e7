"""The Kubernetes manifests (submissions/fleet/kubernetes.py): rendered with a course's
settings, valid against Kubernetes' own schemas offline (kubernetes-validate, strict), and
the KEDA queue query counting what the queue holds on both databases."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from sqlalchemy import text

from submissions.fleet.kubernetes import MANIFESTS, QUEUE_QUERY, KubernetesSettings, render

from ..helpers import create_student, kernel_source, upload

COURSE = dict(namespace="gpu-kernels-2026", api_image="registry.cs.example.edu/grader/api:2026.12",
              worker_image="registry.cs.example.edu/grader/worker:2026.12", worker_max_replicas=6,
              gpu_node_selector="NVIDIA-H100-80GB-HBM3")


def _documents(out: Path) -> list[dict]:
    return [document for name in MANIFESTS for document in yaml.safe_load_all((out / name).read_text()) if document]


def test_grader_fleet_kubernetes_renders_the_course_settings(tmp_path: Path) -> None:
    arguments = [f"--{key.replace('_', '-')}={value}" for key, value in COURSE.items()]
    answer = subprocess.run([sys.executable, "-m", "grader", "fleet", "kubernetes", "--out", str(tmp_path), *arguments],
                            capture_output=True, text=True, timeout=60, check=False)
    assert answer.returncode == 0, answer.stderr
    documents = _documents(tmp_path)
    assert {d["metadata"].get("namespace", d["metadata"]["name"]) for d in documents} == {COURSE["namespace"]}
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    worker = by_kind[("Deployment", "grader-worker")]["spec"]["template"]["spec"]
    (container,) = worker["containers"]
    assert container["image"] == COURSE["worker_image"] and container["command"] == ["grader", "worker"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert worker["securityContext"]["appArmorProfile"] == {"type": "Localhost", "localhostProfile": "grader-worker"}
    assert worker["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    secrets = {env["valueFrom"]["secretKeyRef"]["key"] for env in container["env"] if "secretKeyRef" in env.get("valueFrom", {})}
    assert secrets == {"database-url", "instructor-token", "deployment-seed"}
    scaled = by_kind[("ScaledObject", "grader-worker")]["spec"]
    assert scaled["scaleTargetRef"]["name"] == "grader-worker" and scaled["maxReplicaCount"] == 6
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "postgresql" and trigger["metadata"]["query"] == QUEUE_QUERY
    assert trigger["authenticationRef"]["name"] in {name for kind, name in by_kind if kind == "TriggerAuthentication"}
    api = by_kind[("Deployment", "grader-api")]["spec"]["template"]["spec"]["containers"][0]
    assert "--workers-embedded" in api["command"] and api["command"][api["command"].index("--workers-embedded") + 1] == "0"
    assert yaml.safe_load((tmp_path / "kustomization.yaml").read_text())["resources"] == list(MANIFESTS)


def test_the_manifests_are_valid_kubernetes_objects(tmp_path: Path) -> None:
    render(KubernetesSettings.model_validate(COURSE), tmp_path)
    checked = 0
    for document in _documents(tmp_path):
        if document["apiVersion"].startswith("keda.sh/"):
            continue  # KEDA's CRDs have no offline schema; their fields are checked above
        kubernetes_validate.validate(document, "1.33", strict=True)
        checked += 1
    assert checked == 6  # namespace, configmap, job, 2 deployments, service


def test_settings_that_kubernetes_would_refuse_are_refused_before_rendering() -> None:
    with pytest.raises(ValueError, match="namespace"):
        KubernetesSettings(namespace="Kernel_Grader")
    with pytest.raises(ValueError, match="worker_memory"):
        KubernetesSettings(worker_memory="64 GB")


def test_the_keda_query_counts_queued_and_running_gradings(client, db_session) -> None:
    from submissions import repository
    from submissions.models import utc_now

    assert db_session.execute(text(QUEUE_QUERY)).scalar_one() == 0
    _, token = create_student(client)
    for index in range(3):
        assert upload(client, token, kernel_source(f"n={index}")).status_code == 202
    assert db_session.execute(text(QUEUE_QUERY)).scalar_one() == 3
    # One claimed: it still wants a worker (its own), and the queue depth drops by one.
    assert repository.claim_next_submission(db_session, worker_id="w", lease_s=60, now=utc_now()) is not None
    db_session.flush()
    assert repository.count_queued_gradings(db_session) == 2
    assert db_session.execute(text(QUEUE_QUERY)).scalar_one() == 3
