"""The record of where a grading ran (grader/sandbox/placement.py): nvidia-smi's answer parsed into
the result document's placement, and a CPU run's placement (host and cores, no GPU)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from grader.report.document import Placement
from grader.sandbox.placement import finish_placement, parse_gpu_query, start_placement, visible_gpu

#: One line of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` on the lent H200.
H200_LINE = "1, GPU-0c5b7a53-6a3e-2f7c-9d1b-3f4e5a6b7c8d, NVIDIA H200, 00000000:19:00.0, 580.159.04, 1980, 3201, 34, 121.50"


def test_an_nvidia_smi_line_becomes_the_gpu_identity_and_clocks() -> None:
    identity, clocks = parse_gpu_query(H200_LINE)
    assert (identity.name, identity.index, identity.pci_bus_id) == ("NVIDIA H200", 1, "00000000:19:00.0")
    assert identity.uuid == "GPU-0c5b7a53-6a3e-2f7c-9d1b-3f4e5a6b7c8d" and identity.driver == "580.159.04"
    assert (clocks.sm_mhz, clocks.memory_mhz, clocks.temperature_c, clocks.power_w) == (1980, 3201, 34, 121.5)
    _, unsupported = parse_gpu_query(H200_LINE.replace("121.50", "[N/A]"))
    assert unsupported.power_w is None
    with pytest.raises(ValueError, match="expected 9"):
        parse_gpu_query("NVIDIA H200, 1980")


def test_the_visible_gpu_is_the_first_of_cuda_visible_devices() -> None:
    assert visible_gpu({"CUDA_VISIBLE_DEVICES": "GPU-abc,GPU-def"}) == "GPU-abc"
    assert visible_gpu({"CUDA_VISIBLE_DEVICES": ""}) == "0"
    assert visible_gpu({}) == "0"


def test_a_cpu_grading_records_its_host_and_cores_and_no_gpu() -> None:
    placement = start_placement("cpu", fallback_name="cpu (Triton interpreter)")
    assert placement.gpu is None and placement.host
    assert placement.cpus == sorted(os.sched_getaffinity(0))
    assert finish_placement(placement) == placement


def test_a_cuda_grading_reads_the_clocks_at_start_and_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # nvidia-smi stands in as a script that answers like the H200's (this machine has no GPU);
    # the second call reports the clocks after the benchmark.
    calls = tmp_path / "calls"
    script = tmp_path / "nvidia-smi"
    script.write_text(f"""#!/bin/sh
echo "$@" >> {calls}
if [ "$(wc -l < {calls})" -gt 1 ]; then echo "{H200_LINE.replace('1980', '1755')}"; else echo "{H200_LINE}"; fi
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    started = start_placement("cuda", fallback_name="NVIDIA H200")
    assert started.gpu is not None and started.gpu.clocks_start.sm_mhz == 1980 and started.gpu.clocks_end is None
    finished = finish_placement(started)
    assert finished.gpu.clocks_end.sm_mhz == 1755
    first, second = calls.read_text().splitlines()
    assert first.endswith("-i 1") and second.endswith(f"-i {started.gpu.uuid}")
    assert Placement.model_validate(finished.model_dump()) == finished


def test_without_nvidia_smi_the_gpu_is_named_from_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    placement = start_placement("cuda", fallback_name="NVIDIA H200")
    assert placement.gpu is not None and placement.gpu.name == "NVIDIA H200" and placement.gpu.uuid is None
