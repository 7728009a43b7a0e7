"""Where a grading runs: its host, the host cores it may use, and the GPU (torch-free).

A result names the physical GPU that timed it (model, nvidia-smi index, UUID, PCI address)
and the GPU's clocks, temperature and power when the grading started and ended, so that a
board never ranks timings of different GPU models against each other and a figure taken on a
throttled card can be found afterwards (docs/deployment.md, "Several GPUs on one host").

The GPU is the first entry of ``CUDA_VISIBLE_DEVICES`` (an index or a ``GPU-...`` UUID, as a
worker bound with ``grader worker --gpu`` sets it), else nvidia-smi's GPU 0; its identity comes
from ``nvidia-smi --query-gpu``, which every host with the NVIDIA driver has. No nvidia-smi,
or one that does not answer within ``NVIDIA_SMI_TIMEOUT_S``, leaves the GPU's fields empty
rather than failing the grading: the identity is a record, not a verdict.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Mapping

from grader.report.document import GpuClocks, GpuIdentity, Placement

#: Seconds one nvidia-smi query may take (it answers in about 50 ms on an idle H200 host).
NVIDIA_SMI_TIMEOUT_S = 5.0

#: nvidia-smi's names of the fields read, in the order of its CSV answer.
_QUERY_FIELDS = ("index", "uuid", "name", "pci.bus_id", "driver_version", "clocks.sm", "clocks.mem",
                 "temperature.gpu", "power.draw")


def visible_gpu(environ: Mapping[str, str] | None = None) -> str:
    """The nvidia-smi ``-i`` argument of the GPU this process's ``cuda:0`` is: the first entry
    of ``CUDA_VISIBLE_DEVICES`` (an index, a UUID or a MIG name), else ``0``."""
    environ = os.environ if environ is None else environ
    first = environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return first or "0"


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def _int(text: str) -> int | None:
    value = _float(text)
    return None if value is None else int(value)


def parse_gpu_query(line: str) -> tuple[GpuIdentity, GpuClocks]:
    """One CSV line of ``nvidia-smi --query-gpu=<_QUERY_FIELDS> --format=csv,noheader,nounits``.

    Raises:
        ValueError: the line does not have one value per field.
    """
    values = [value.strip() for value in line.split(",")]
    if len(values) != len(_QUERY_FIELDS):
        raise ValueError(f"nvidia-smi answered {len(values)} fields, expected {len(_QUERY_FIELDS)}: {line!r}")
    index, uuid, name, bus_id, driver, sm, mem, temperature, power = values
    clocks = GpuClocks(sm_mhz=_int(sm), memory_mhz=_int(mem), temperature_c=_int(temperature), power_w=_float(power))
    identity = GpuIdentity(name=name, index=_int(index), uuid=uuid or None, pci_bus_id=bus_id or None,
                           driver=driver or None)
    return identity, clocks


def query_gpu(gpu: str) -> tuple[GpuIdentity, GpuClocks] | None:
    """nvidia-smi's identity and current clocks of ``gpu`` (an index or UUID), or None where
    nvidia-smi is missing, fails or does not answer in time."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    try:
        answer = subprocess.run(  # noqa: S603 - fixed argv
            [executable, f"--query-gpu={','.join(_QUERY_FIELDS)}", "--format=csv,noheader,nounits", "-i", gpu],
            capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = answer.stdout.strip().splitlines()[0] if answer.returncode == 0 and answer.stdout.strip() else ""
    try:
        return parse_gpu_query(line) if line else None
    except ValueError:
        return None


def host_cpus() -> list[int]:
    """The host cores this process may run on (its CPU affinity), sorted."""
    return sorted(os.sched_getaffinity(0))


def start_placement(device: str, *, fallback_name: str) -> Placement:
    """The placement of a grading that starts now on ``device`` (``cpu`` or ``cuda``): the
    host, the host cores, and on CUDA the GPU with its clocks at the start (``clocks_start``).
    ``fallback_name`` names the GPU when nvidia-smi cannot (torch's device name)."""
    gpu = None
    if device == "cuda":
        answer = query_gpu(visible_gpu())
        gpu = (answer[0].model_copy(update={"clocks_start": answer[1]}) if answer is not None
               else GpuIdentity(name=fallback_name))
    return Placement(host=socket.gethostname(), cpus=host_cpus(), gpu=gpu)


def finish_placement(placement: Placement) -> Placement:
    """``placement`` with the GPU's clocks at the end of the grading (``clocks_end``)."""
    if placement.gpu is None or placement.gpu.clocks_start is None:
        return placement
    answer = query_gpu(placement.gpu.uuid or visible_gpu())
    if answer is None:
        return placement
    return placement.model_copy(update={"gpu": placement.gpu.model_copy(update={"clocks_end": answer[1]})})
