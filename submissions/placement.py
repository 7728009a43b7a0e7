"""Binding a worker to one GPU and to host cores of its own.

Timing needs a GPU to itself, and the replay's host work (launching, verifying every timed
output, the parent's oracles) needs cores that another worker's grading does not take: two
workers on one host each get one GPU (``CUDA_VISIBLE_DEVICES``, so the grader sees it as
``cuda:0``) and a disjoint set of host cores (the CPU affinity of the worker process, which
the grader, its sandboxed children and the replay process inherit). docs/deployment.md,
"Several GPUs on one host", says how many workers a host should run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Linux's CPU-list syntax (``0-7,16-23``, as in ``taskset -c`` and cpuset files) as sorted
    CPU numbers.

    Raises:
        ValueError: not a CPU list (empty, negative, a reversed range, not a number).
    """
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            raise ValueError(f"not a CPU list: {text!r} (an empty entry)")
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"not a CPU list: {text!r} (entry {part!r})")
        low, high = int(first), int(last) if last else int(first)
        if high < low:
            raise ValueError(f"not a CPU list: {text!r} (range {part!r} runs backwards)")
        cpus.update(range(low, high + 1))
    return tuple(sorted(cpus))


def format_cpu_list(cpus: Sequence[int]) -> str:
    """The shortest CPU-list text of ``cpus`` (``[0, 1, 2, 5]`` -> ``0-2,5``)."""
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    start = previous = None
    for cpu in [*ordered, None]:
        if cpu is not None and previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(ranges)


def split_cpus(cpus: Sequence[int], count: int) -> list[tuple[int, ...]]:
    """``cpus`` cut into ``count`` disjoint runs of consecutive entries, as equal as they can
    be (the first ones get one more when they do not divide): neighbouring CPU numbers are
    mostly cores of one socket, so each worker's cores stay together.

    Raises:
        ValueError: fewer CPUs than parts, or ``count`` < 1.
    """
    ordered = sorted(set(cpus))
    if count < 1:
        raise ValueError(f"cannot split CPUs into {count} parts")
    if len(ordered) < count:
        raise ValueError(f"{len(ordered)} host cores cannot give each of {count} workers one of its own")
    size, extra = divmod(len(ordered), count)
    parts, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        parts.append(tuple(ordered[start:end]))
        start = end
    return parts


@dataclass(frozen=True)
class WorkerPlacement:
    """One worker's GPU and host cores.

    Attributes:
        gpu: the GPU's nvidia-smi index or UUID (``GPU-...``), or None for the host's default.
        cpus: host cores (Linux CPU numbers), or None to keep the inherited affinity.
    """

    gpu: str | None = None
    cpus: tuple[int, ...] | None = None

    def environment(self) -> dict[str, str]:
        """The variables a worker process started with this placement needs."""
        return {} if self.gpu is None else {"CUDA_VISIBLE_DEVICES": self.gpu}

    def apply(self) -> None:
        """Bind this process (and every process it starts afterwards) to the placement.

        Raises:
            OSError: a CPU is not available to this process (``sched_setaffinity``).
        """
        if self.gpu is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = self.gpu
        if self.cpus is not None:
            os.sched_setaffinity(0, self.cpus)


def embedded_placements(count: int, gpus: Sequence[str] | None,
                        cpus: Sequence[int] | None = None) -> list[WorkerPlacement]:
    """The placements of ``count`` workers on one host: worker ``i`` takes ``gpus[i]`` and the
    ``i``-th of ``count`` disjoint runs of ``cpus`` (default: this process's affinity). Without
    ``gpus`` the workers keep the inherited GPU and cores.

    Raises:
        ValueError: ``gpus`` does not name one GPU per worker, or too few cores.
    """
    if not gpus:
        return [WorkerPlacement() for _ in range(count)]
    if len(gpus) != count:
        raise ValueError(f"{count} workers need {count} GPUs, one each; got {len(gpus)}: {','.join(gpus)}")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"each worker needs a GPU of its own; {','.join(gpus)} names one twice")
    pool = sorted(os.sched_getaffinity(0)) if cpus is None else list(cpus)
    return [WorkerPlacement(gpu=gpu, cpus=part) for gpu, part in zip(gpus, split_cpus(pool, count))]


def describe_launcher(environ: Mapping[str, str]) -> str | None:
    """What started this worker, from the variables its scheduler sets: ``slurm job 123
    (partition gpu)``, ``kubernetes pod grader-worker-0`` (``POD_NAME``, set by the manifests in
    deploy/kubernetes from the downward API, else the host name Kubernetes gives the pod), or
    None (started by hand, compose, `grader serve`)."""
    if environ.get("SLURM_JOB_ID"):
        partition = environ.get("SLURM_JOB_PARTITION")
        return f"slurm job {environ['SLURM_JOB_ID']}" + (f" (partition {partition})" if partition else "")
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return f"kubernetes pod {environ.get('POD_NAME') or environ.get('HOSTNAME', '?')}"
    return None


def describe_gpu(gpu: str | None, *, device: str) -> str | None:
    """The worker's GPU as its heartbeat shows it (``NVIDIA H200, index 1, GPU-...``), from
    nvidia-smi; None on a CPU worker or where nvidia-smi cannot tell."""
    if device == "cpu":
        return None
    from grader.sandbox.placement import query_gpu

    answer = query_gpu(gpu or "0")
    if answer is None:
        return None
    identity = answer[0]
    return ", ".join(part for part in (identity.name, f"index {identity.index}" if identity.index is not None else "",
                                       identity.uuid or "") if part)
