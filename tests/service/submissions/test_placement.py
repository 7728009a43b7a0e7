"""Binding workers to one GPU and disjoint host cores (submissions/placement.py), through
`grader worker --cpus` and `grader serve --workers-embedded 2 --gpus 0,1` for real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from submissions.placement import (
    WorkerPlacement,
    describe_launcher,
    embedded_placements,
    format_cpu_list,
    parse_cpu_list,
    split_cpus,
)

from ..helpers import wait_until, worker_environment
from ..test_end_to_end import _children, _environment, _free_port


def test_cpu_lists_parse_and_print_in_linux_syntax() -> None:
    assert parse_cpu_list("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert format_cpu_list((11, 0, 1, 2, 3, 8, 10)) == "0-3,8,10-11"
    for bad in ("", "1,,2", "3-1", "a", "-2", "1-"):
        with pytest.raises(ValueError, match="not a CPU list"):
            parse_cpu_list(bad)


def test_cores_split_into_disjoint_runs_and_refuse_too_few() -> None:
    assert split_cpus(range(16), 2) == [tuple(range(8)), tuple(range(8, 16))]
    assert split_cpus([0, 1, 2, 3, 4], 2) == [(0, 1, 2), (3, 4)]
    with pytest.raises(ValueError, match="cannot give each of 3 workers"):
        split_cpus([0, 1], 3)


def test_embedded_placements_give_each_worker_its_own_gpu_and_cores() -> None:
    first, second = embedded_placements(2, ["0", "GPU-abc"], cpus=range(32))
    assert (first.gpu, second.gpu) == ("0", "GPU-abc")
    assert set(first.cpus).isdisjoint(second.cpus) and len(first.cpus) == len(second.cpus) == 16
    assert first.environment() == {"CUDA_VISIBLE_DEVICES": "0"}
    with pytest.raises(ValueError, match="need 2 GPUs"):
        embedded_placements(2, ["0"])
    with pytest.raises(ValueError, match="names one twice"):
        embedded_placements(2, ["1", "1"])
    assert embedded_placements(2, None) == [WorkerPlacement(), WorkerPlacement()]


def test_the_launcher_is_named_from_the_scheduler_variables() -> None:
    assert describe_launcher({"SLURM_JOB_ID": "42", "SLURM_JOB_PARTITION": "gpu"}) == "slurm job 42 (partition gpu)"
    assert describe_launcher({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "POD_NAME": "grader-worker-7"}) == \
        "kubernetes pod grader-worker-7"
    assert describe_launcher({}) is None


def _cpus_allowed(pid: int) -> set[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return set(parse_cpu_list(line.split(":", 1)[1].strip()))
    raise AssertionError(f"no Cpus_allowed_list for {pid}")


def _argument(pid: int, option: str) -> str | None:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return argv[argv.index(option) + 1] if option in argv else None


def test_a_placement_reaches_the_graders_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from submissions.grading import grader_environment

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    before = os.sched_getaffinity(0)
    try:
        WorkerPlacement(gpu="GPU-1234", cpus=(min(before),)).apply()
        assert grader_environment(os.environ)["CUDA_VISIBLE_DEVICES"] == "GPU-1234"
        assert os.sched_getaffinity(0) == {min(before)}
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.slow
def test_serve_binds_each_embedded_worker_to_its_gpu_and_disjoint_cores(tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("this test needs 2 host cores (the development machines have 2)")
    env = _environment(database_url=f"sqlite:///{tmp_path}/grader.db", grader_warm_start="false")
    port = _free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        serve = subprocess.Popen([sys.executable, "-m", "grader", "serve", "--port", str(port),
                                  "--workers-embedded", "2", "--gpus", "0,1"],
                                 cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        workers = wait_until(lambda: len(_children(serve.pid)) == 2 and _children(serve.pid), timeout=30,
                             message="two embedded workers")
        # A worker applies its placement once it has started (its log says so).
        wait_until(lambda: (tmp_path / "serve.log").read_text().count("worker bound to GPU") == 2, timeout=60,
                   message=f"both workers bound\n{(tmp_path / 'serve.log').read_text()[-2000:]}")
        allowed = [_cpus_allowed(pid) for pid in sorted(workers)]
        assert allowed[0] and allowed[1] and allowed[0].isdisjoint(allowed[1])
        gpus = sorted(_argument(pid, "--gpu") for pid in workers)
        assert gpus == ["0", "1"]
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)


def test_a_worker_with_an_idle_exit_leaves_by_itself(committed_db, tmp_path: Path) -> None:
    env = worker_environment(committed_db.url, worker_idle_exit_s="1", grader_warm_start="false")
    started = subprocess.run([sys.executable, "-m", "submissions.cli", "worker", "--cpus", "0"], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert started.returncode == 0, started.stderr
    assert "no job for 1 s; exiting" in started.stderr
    assert "worker bound to GPU (default), host cores 0" in started.stderr
