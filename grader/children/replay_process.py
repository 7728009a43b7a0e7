"""The parent's side of record-and-replay on a GPU: validate a recording, run the trusted replay
process, read back what it produced.

The correctness child (where the submission runs) leaves ``recording/recording.json`` and the
cubins of the kernels it launched. Everything there is hostile: ``load_recording`` validates it
against the protocol's allow-list (grader/harness/protocol.py: kernel names, signature types,
launch limits, buffer names, sizes) and checks every cubin against the sha256 it is named by.
Only then are the validated records and the checked cubins copied into a fresh folder for the
replay process (grader/harness/replay_child.py), which runs in the sandbox with the GPU and
never sees the submission's file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pydantic import ValidationError
from safetensors.torch import save_file

from grader.assignments.protocol import Assignment
from grader.checks.plan import CallEvidence, Plan
from grader.evidence.child_files import CUBIN, RECORDING, RESULT, ChildFileRejected, ChildFolder, read_to_cap
from grader.harness.protocol import (
    BenchmarkPlan,
    CallRecording,
    Recording,
    ReplayCallStatus,
    ReplayPlan,
    ReplayResult,
    TensorSpec,
)
from grader.sandbox.run import ChildOutcome, run_sandboxed, stage_harness
from grader.settings import GraderSettings


class RecordingRejected(ValueError):
    """The recording does not pass validation; the message says which rule it broke."""


@dataclass
class ReplayOutcome:
    """What the replay process produced.

    Attributes:
        check_outputs: call id -> the replayed output tensor (CPU); ``<call id>:out<k>`` ->
            output k >= 1 of a tuple-returning call.
        check_status: call id -> how its replay went.
        result: the whole ``replay_result.json`` (benchmark rows with raw samples, gpu, versions).
        error: why the process produced nothing usable (None when it ran).
        duration_s: wall time of the process, seconds.
        log: its captured output (head and tail).
    """

    check_outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    check_status: dict[str, ReplayCallStatus] = field(default_factory=dict)
    result: ReplayResult = field(default_factory=ReplayResult)
    error: str | None = None
    duration_s: float = 0.0
    log: dict = field(default_factory=dict)


def load_recording(folder: Path) -> Recording:
    """The validated recording in ``folder`` (recording.json + kernel_<sha256>.cubin files).

    Raises:
        RecordingRejected: missing, malformed, over a limit, or a cubin that does not match.
        ChildFileRejected: a file of it, or the folder, is a link, a FIFO, a device, ... or
            over its cap (grader/evidence/child_files.py).
    """
    files = ChildFolder(folder.parent)
    raw = files.read(f"{folder.name}/recording.json", RECORDING)
    if raw is None:
        raise RecordingRejected("no recording: the child wrote none")
    try:
        recording = Recording.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise RecordingRejected(f"the recording is malformed: {first['msg']} at {first['loc']}") from None
    for kernel in recording.kernels:
        cubin = files.read(f"{folder.name}/kernel_{kernel.id}.cubin", CUBIN)
        if cubin is None:
            raise RecordingRejected(f"kernel {kernel.name}: its cubin is missing")
        if hashlib.sha256(cubin).hexdigest() != kernel.id:
            raise RecordingRejected(f"kernel {kernel.name}: the cubin does not match its recorded sha256")
    return recording


def replay_inputs(plan: Plan, recordings: dict[str, CallRecording]) -> dict[str, torch.Tensor]:
    """The new input bytes of every recorded check call: key ``<call id>|arg<i>`` (or
    ``|kwarg_<name>``) -> the whole replay base of that argument as uint8 (the recorded pointer
    offsets are offsets into the base)."""
    tensors: dict[str, torch.Tensor] = {}
    calls = plan.calls()
    for call_id, recording in recordings.items():
        call = calls[call_id]
        named = {f"arg{i}": spec for i, spec in enumerate(call.replay_args)}
        named.update({f"kwarg_{k}": spec for k, spec in call.replay_kwargs.items()})
        for buffer in recording.buffers:
            spec = named.get(buffer.name)
            if isinstance(spec, TensorSpec):
                base = plan.bank.bases[spec.base].contiguous()
                tensors[f"{call_id}|{buffer.name}"] = base.view(-1).view(torch.uint8).clone()
    return tensors


class ReplayProcess:
    """The trusted replay process of one grading, started early and fed by files.

    ``start`` launches it (sandboxed, GPU) in a thread: it imports torch and makes its CUDA
    context while the correctness child runs. ``send_checks`` gives it the validated recording
    (phase 1), ``send_benchmark`` the benchmark rows or nothing (phase 2, or the end), and
    ``wait`` returns what it produced. ``close`` ends it early and cleans up.

    Raises (from ``start``'s thread, re-raised by ``wait``):
        SandboxUnavailable: bubblewrap required but missing.
    """

    def __init__(self, assignment: Assignment, settings: GraderSettings, *, timeout_s: float,
                 max_idle_s: float = 0.0) -> None:
        """``timeout_s``: the process's wall-clock limit for its own work (start-up and both
        phases); the time it waits for the parent's plans is not counted, up to ``max_idle_s``
        (so a spinning kernel holds the GPU for ``timeout_s`` at most, and a process whose
        parent never answers ends after ``timeout_s + max_idle_s``)."""
        self.assignment = assignment
        self.settings = settings.model_copy(update={"child_timeout_s": timeout_s})
        self.max_idle_s = max_idle_s
        self.workdir = Path(tempfile.mkdtemp(prefix="replay-", dir=settings.work_root or None))
        self.harness_root = Path(tempfile.mkdtemp(prefix="replay-harness-", dir=settings.work_root or None))
        self._thread: threading.Thread | None = None
        self._outcome: ChildOutcome | None = None
        self._failure: BaseException | None = None
        self._started = time.monotonic()
        self._checks_sent: float | None = None
        self._benchmark_sent: float | None = None
        self._idle_between: float | None = None  # phase 1 done -> phase 2 sent, seconds, once known

    def _phase1_done_ago(self) -> float | None:
        """Seconds since the process wrote phase 1's result, or None if it has not."""
        files = ChildFolder(self.workdir)
        try:
            with files.open("replay_result.json", RESULT) as opened:
                if opened is None:
                    return None
                fd, info = opened
                if ReplayResult.model_validate_json(read_to_cap(fd, "replay_result.json", RESULT)).phase != "checks":
                    return None
                return max(0.0, time.time() - info.st_mtime)
        except (ChildFileRejected, ValueError):
            return None

    def idle_s(self, now: float) -> float:
        """How long the process has waited for its plans so far (``time.monotonic()`` seconds):
        before phase 1 was sent, and between phase 1's end and phase 2 being sent. The sandbox's
        clock leaves it out (run_sandboxed's ``idle_s``), up to ``max_idle_s``."""
        first = (self._checks_sent if self._checks_sent is not None else now) - self._started
        if self._idle_between is not None:
            between = self._idle_between
        elif self._checks_sent is not None and self._benchmark_sent is None:
            between = self._phase1_done_ago() or 0.0
        else:
            between = 0.0
        return min(first + between, self.max_idle_s)

    def start(self) -> ReplayProcess:
        harness = stage_harness(self.harness_root, {"assignment_bench.py": self.assignment.benchmark.bench_file,
                                                    "assignment_oracle.py": self.assignment.benchmark.oracle_file})

        def run() -> None:
            try:
                self._outcome = run_sandboxed(harness=harness / "replay_child.py", workdir=self.workdir,
                                              device="cuda", settings=self.settings, args=[str(self.workdir)],
                                              idle_s=self.idle_s)
            except BaseException as exc:  # noqa: BLE001 - re-raised by wait()
                self._failure = exc

        self._thread = threading.Thread(target=run, name="replay-process", daemon=True)
        self._thread.start()
        return self

    def _put(self, name: str, text: str) -> None:
        tmp = self.workdir / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.workdir / name)

    def send_checks(self, recording: Recording, *, folder: Path, check_calls: list[CallRecording],
                    check_inputs: dict[str, torch.Tensor]) -> None:
        """Phase 1: the validated recording (``folder`` holds its checked cubins), the check
        calls to replay and their inputs (``replay_inputs``).

        Raises:
            ChildFileRejected: a cubin is no longer the one ``load_recording`` checked.
        """
        kernels = self.workdir / "kernels"
        kernels.mkdir(exist_ok=True)
        files = ChildFolder(folder.parent)
        for kernel in recording.kernels:
            # Read again through the checks, and matched again: the bytes sent are the ones checked.
            name = f"{folder.name}/kernel_{kernel.id}.cubin"
            cubin = files.read(name, CUBIN)
            if cubin is None or hashlib.sha256(cubin).hexdigest() != kernel.id:
                raise ChildFileRejected(name, "it changed after it was checked")
            (kernels / f"kernel_{kernel.id}.cubin").write_bytes(cubin)
        if check_inputs:
            save_file(check_inputs, str(self.workdir / "replay_inputs.safetensors"))
        plan = ReplayPlan(kernels=recording.kernels, check_calls=check_calls, check_inputs="replay_inputs.safetensors")
        self._put("replay_plan.json", plan.model_dump_json())
        self._checks_sent = time.monotonic()

    def send_benchmark(self, benchmark: BenchmarkPlan | None) -> None:
        """Phase 2: the rows to time, each with its recording and how its timed outputs are
        verified (the checks' own tolerances); None ends the process."""
        self._idle_between = self._phase1_done_ago() or 0.0 if self._checks_sent is not None else 0.0
        self._benchmark_sent = time.monotonic()
        if benchmark is None:
            self._put("quit", "")
        else:
            self._put("benchmark_plan.json", benchmark.model_dump_json())

    def stop_benchmark(self) -> None:
        """Phase 2 need not finish (a check failed while the rows were being timed): the rows
        not started yet are skipped; ``wait()`` then returns as soon as the row in progress ends."""
        self._put("stop_benchmark", "")

    def close(self) -> None:
        """End the process (if it still waits, or times rows: it stops before the next row)
        and remove its folders."""
        self._put("stop_benchmark", "")
        self._put("quit", "")
        if self._thread is not None:
            self._thread.join(timeout=60)
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self.harness_root, ignore_errors=True)

    def wait(self) -> ReplayOutcome:
        """What the process produced (it must have been sent a benchmark plan or None)."""
        if self._thread is not None:
            self._thread.join()
        if self._failure is not None:
            raise self._failure
        outcome = self._outcome
        if outcome is None:
            raise RuntimeError("the replay process was not started, or its thread left no outcome")
        replay = ReplayOutcome(duration_s=outcome.duration_s, log=outcome.log.as_json())
        files = ChildFolder(self.workdir)
        try:
            raw = files.read("replay_result.json", RESULT)
            replay.result = ReplayResult.model_validate_json(raw) if raw else ReplayResult()
        except ValueError:
            replay.result = ReplayResult()
        if outcome.timed_out:
            replay.error = f"the replay process did not finish within {self.settings.child_timeout_s:g} s"
        elif outcome.signal is not None or (outcome.returncode or 0) != 0:
            replay.error = (f"the replay process ended with status {outcome.returncode}"
                            + (f" (signal {outcome.signal})" if outcome.signal else "")
                            + f": {outcome.log.text[-600:]}")
        elif replay.result.error:
            replay.error = replay.result.error
        replay.check_status = replay.result.check_calls
        try:
            replay.check_outputs = files.load_tensors("replay_outputs.safetensors") or {}
        except ValueError:
            replay.check_outputs = {}
        return replay


def calls_to_replay(plan: Plan, evidence_calls: dict[str, CallEvidence]) -> list[str]:
    """The check calls the trusted replay process must replay on a GPU: every planned call that
    records its launches and returned normally, whatever replay status the child reported for
    it. Replay outputs the child saved are dropped from the evidence first: on a GPU only the
    trusted process's outputs count (a child that reported "replayed", the CPU interpreter's
    status, with outputs of its own making would otherwise pass ``triton_kernel``)."""
    for evidence in evidence_calls.values():
        evidence.replay_out = None
        evidence.more_replay_outs = []
        evidence.replay_inputs_modified = None
    return [call_id for call_id, call in plan.calls().items()
            if call.record_launches and (found := evidence_calls.get(call_id)) is not None
            and found.report is not None and found.report.status == "ok"]


def inject(evidence_calls: dict[str, CallEvidence], replay: ReplayOutcome, recorded: list[str]) -> None:
    """Put the replayed outputs (or why there is none), and the inputs the replayed launches
    changed, into the evidence of each recorded call."""
    for call_id in recorded:
        evidence = evidence_calls.get(call_id)
        if evidence is None:
            continue
        evidence.replay_out = replay.check_outputs.get(call_id)
        more = len(evidence.report.more_outputs) if evidence.report is not None else 0
        evidence.more_replay_outs = [replay.check_outputs.get(f"{call_id}:out{k}") for k in range(1, 1 + more)]
        status = replay.check_status.get(call_id)
        evidence.replay_inputs_modified = list(status.inputs_modified) if status and status.status == "ok" else None
        if evidence.replay_out is None:
            status = replay.check_status.get(call_id)
            evidence.replay_error = (status.message if status else "") or replay.error or \
                "the replay process produced no output"
