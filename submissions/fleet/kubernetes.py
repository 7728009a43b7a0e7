"""The Kubernetes manifests of a course's deployment, rendered with its settings
(`grader fleet kubernetes --out DIR`; then `kubectl apply -k DIR`).

The templates (submissions/fleet/templates/*.yaml.j2) describe: the namespace, a ConfigMap of
the settings that are not secret, the migration Job, the API Deployment and Service, the GPU
worker Deployment (one worker and one GPU per pod, bubblewrap's needs and nothing more:
CAP_SYS_ADMIN, an unmasked /proc in a user namespace, the worker's AppArmor and seccomp
profiles) and a KEDA ScaledObject that sets the number of worker pods from the queue
(``QUEUE_QUERY``). Secrets are never rendered: they come from a Secret the staff create
(docs/deployment.md, "Kubernetes").
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from pydantic import BaseModel, ConfigDict, Field

TEMPLATES = Path(__file__).with_name("templates")

#: The gradings a worker pod is wanted for: queued and being graded (KEDA's PostgreSQL
#: trigger, one pod per row, targetQueryValue 1). tests/service/submissions/test_fleet_kubernetes.py
#: runs it against the migrated schema.
QUEUE_QUERY = "SELECT COUNT(*) FROM gradings WHERE status IN ('queued', 'running')"

#: The manifests in the order `kubectl apply` should see them (kustomize keeps this order).
MANIFESTS = ("namespace.yaml", "configmap.yaml", "migrate-job.yaml", "api.yaml", "worker.yaml", "scaledobject.yaml")


class KubernetesSettings(BaseModel):
    """The course's choices that the manifests carry (every one has a default but the images)."""

    model_config = ConfigDict(extra="forbid")

    namespace: str = Field("kernel-grader", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63,
                           description="the namespace of every object")
    api_image: str = Field("registry.example.edu/kernel-grader-api:latest", min_length=1,
                           description="the API image (docker/api.Dockerfile), pushed to the cluster's registry")
    worker_image: str = Field("registry.example.edu/kernel-grader-worker:latest", min_length=1,
                              description="the GPU worker image (docker/worker.Dockerfile)")
    secret_name: str = Field("grader-secrets", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                             description="the Secret with database-url, instructor-token, deployment-seed, keda-connection")
    api_replicas: int = Field(2, ge=1, le=100, description="API replicas")
    worker_min_replicas: int = Field(0, ge=0, le=1000, description="GPU worker pods when the queue is empty")
    worker_max_replicas: int = Field(8, ge=1, le=1000, description="most GPU worker pods (GPUs) at once")
    worker_cpus: int = Field(8, ge=1, le=512, description="host cores requested per worker pod")
    worker_memory: str = Field("64Gi", pattern=r"^[0-9]+(Mi|Gi)$", description="memory per worker pod")
    gpu_resource: str = Field("nvidia.com/gpu", min_length=1, description="the GPU's extended resource name")
    gpu_node_selector_key: str = Field("nvidia.com/gpu.product", description="node label that names the GPU model")
    gpu_node_selector: str = Field("NVIDIA-H200", description="that label's value ('' for any GPU node; boards "
                                   "compare one GPU model, so pin one)")
    apparmor_profile: str = Field("grader-worker", min_length=1, description="AppArmor profile loaded on the GPU nodes")
    seccomp_profile: str = Field("", description="seccomp profile under the kubelet's seccomp folder ('' : RuntimeDefault)")
    polling_interval_s: int = Field(15, ge=1, le=3600, description="KEDA's look at the queue, seconds")
    scale_down_after_s: int = Field(300, ge=0, le=86400, description="KEDA's wait before scaling to the minimum")


def render(settings: KubernetesSettings, out: Path) -> list[Path]:
    """Write every manifest of ``MANIFESTS`` and a kustomization.yaml listing them into ``out``;
    returns the paths written.

    Raises:
        jinja2.UndefinedError: a template names a setting that does not exist (a bug).
    """
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                                     keep_trailing_newline=True, autoescape=False)  # noqa: S701 - YAML, not HTML
    values = {**settings.model_dump(), "queue_query": QUEUE_QUERY}
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in MANIFESTS:
        path = out / name
        path.write_text(environment.get_template(f"{name}.j2").render(values))
        written.append(path)
    kustomization = out / "kustomization.yaml"
    kustomization.write_text(
        "# Written by `grader fleet kubernetes`; apply with `kubectl apply -k .`\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"namespace: {settings.namespace}\nresources:\n" + "".join(f"  - {name}\n" for name in MANIFESTS))
    written.append(kustomization)
    return written
