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
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pydantic import ValidationError
from safetensors.torch import load_file, save_file

from grader.assignments.protocol import Assignment
from grader.harness.protocol import MAX_CUBIN_BYTES, CallRecording, Recording
from grader.plan import CallEvidence, Plan
from grader.sandbox import run_sandboxed, stage_harness
from grader.settings import GraderSettings


class RecordingRejected(ValueError):
    """The recording does not pass validation; the message says which rule it broke."""


@dataclass
class ReplayOutcome:
    """What the replay process produced.

    Attributes:
        check_outputs: call id -> the replayed output tensor (CPU).
        check_status: call id -> {"status": "ok"|"error"|"skipped", "message": ...}.
        result: the whole ``replay_result.json`` (benchmark rows with raw samples, gpu, versions).
        error: why the process produced nothing usable (None when it ran).
        duration_s: wall time of the process, seconds.
        log: its captured output (head and tail).
    """

    check_outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    check_status: dict[str, dict] = field(default_factory=dict)
    result: dict = field(default_factory=dict)
    error: str | None = None
    duration_s: float = 0.0
    log: dict = field(default_factory=dict)


def load_recording(folder: Path) -> Recording:
    """The validated recording in ``folder`` (recording.json + kernel_<sha256>.cubin files).

    Raises:
        RecordingRejected: missing, malformed, over a limit, or a cubin that does not match.
    """
    path = folder / "recording.json"
    try:
        recording = Recording.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise RecordingRejected(f"no recording: {exc.strerror}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise RecordingRejected(f"the recording is malformed: {first['msg']} at {first['loc']}") from None
    for kernel in recording.kernels:
        cubin_path = folder / f"kernel_{kernel.id}.cubin"
        try:
            if cubin_path.is_symlink() or cubin_path.stat().st_size > MAX_CUBIN_BYTES:
                raise RecordingRejected(f"kernel {kernel.name}: its cubin is a link or over {MAX_CUBIN_BYTES} bytes")
            digest = hashlib.sha256(cubin_path.read_bytes()).hexdigest()
        except OSError:
            raise RecordingRejected(f"kernel {kernel.name}: its cubin is missing") from None
        if digest != kernel.id:
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
            if spec is not None and getattr(spec, "kind", "") == "tensor":
                base = plan.bank.bases[spec.base].contiguous()
                tensors[f"{call_id}|{buffer.name}"] = base.view(-1).view(torch.uint8).clone()
    return tensors


def run_replay(recording: Recording, *, folder: Path, assignment: Assignment, settings: GraderSettings,
               check_calls: list[CallRecording], check_inputs: dict[str, torch.Tensor],
               benchmark: dict | None = None, timeout_s: float | None = None) -> ReplayOutcome:
    """Run the trusted replay process (see the module docstring).

    Args:
        recording: validated (``load_recording``); ``folder`` holds its checked cubins.
        check_calls / check_inputs: phase 1 (``replay_inputs``).
        benchmark: phase 2: {"rows": [{id, shape, dtype, seed, recording}], "options": {...},
            "tolerances": {dtype: {rtol, atol, vtol}}, "verify_rows_per_call": int}, or None.
        timeout_s: the process's wall-clock limit (default: settings.child_timeout_s).

    Raises:
        SandboxUnavailable: bubblewrap required but missing.
    """
    workdir = Path(tempfile.mkdtemp(prefix="replay-", dir=settings.work_root or None))
    harness_root = Path(tempfile.mkdtemp(prefix="replay-harness-", dir=settings.work_root or None))
    try:
        kernels = workdir / "kernels"
        kernels.mkdir()
        for kernel in recording.kernels:
            shutil.copyfile(folder / f"kernel_{kernel.id}.cubin", kernels / f"kernel_{kernel.id}.cubin")
        if check_inputs:
            save_file(check_inputs, str(workdir / "replay_inputs.safetensors"))
        plan = {
            "kernels": [k.model_dump() for k in recording.kernels],
            "check_calls": [c.model_dump() for c in check_calls],
            "check_inputs": "replay_inputs.safetensors",
            "benchmark": benchmark,
        }
        (workdir / "replay_plan.json").write_text(json.dumps(plan))
        harness = stage_harness(harness_root, {"assignment_bench.py": assignment.benchmark.bench_file,
                                               "assignment_oracle.py": assignment.benchmark.oracle_file})
        limits = settings.model_copy(update={"child_timeout_s": timeout_s or settings.child_timeout_s})
        outcome = run_sandboxed(harness=harness / "replay_child.py", workdir=workdir, device="cuda",
                                settings=limits, args=[str(workdir)])
        replay = ReplayOutcome(duration_s=outcome.duration_s, log=outcome.log.as_json())
        try:
            replay.result = json.loads((workdir / "replay_result.json").read_text())
        except (OSError, ValueError):
            replay.result = {}
        if outcome.timed_out:
            replay.error = f"the replay process did not finish within {limits.child_timeout_s:g} s"
        elif outcome.signal is not None or (outcome.returncode or 0) != 0:
            replay.error = (f"the replay process ended with status {outcome.returncode}"
                            + (f" (signal {outcome.signal})" if outcome.signal else "")
                            + f": {outcome.log.text[-600:]}")
        elif replay.result.get("error"):
            replay.error = str(replay.result["error"])
        replay.check_status = replay.result.get("check_calls") or {}
        outputs = workdir / "replay_outputs.safetensors"
        if outputs.exists():
            replay.check_outputs = load_file(str(outputs))
        return replay
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(harness_root, ignore_errors=True)


def calls_to_replay(plan: Plan, evidence_calls: dict[str, CallEvidence]) -> list[str]:
    """The check calls the trusted replay process must replay on a GPU: every planned call that
    records its launches and returned normally, whatever replay status the child reported for
    it. Replay outputs the child saved are dropped from the evidence first: on a GPU only the
    trusted process's outputs count (a child that reported "replayed", the CPU interpreter's
    status, with outputs of its own making would otherwise pass ``triton_kernel``)."""
    for evidence in evidence_calls.values():
        evidence.replay_out = None
    return [call_id for call_id, call in plan.calls().items()
            if call.record_launches and (evidence := evidence_calls.get(call_id)) is not None
            and evidence.report is not None and evidence.report.status == "ok"]


def inject(evidence_calls: dict[str, CallEvidence], replay: ReplayOutcome, recorded: list[str]) -> None:
    """Put the replayed outputs (or why there is none) into the evidence of each recorded call."""
    for call_id in recorded:
        evidence = evidence_calls.get(call_id)
        if evidence is None:
            continue
        evidence.replay_out = replay.check_outputs.get(call_id)
        if evidence.replay_out is None:
            status = replay.check_status.get(call_id) or {}
            evidence.replay_error = status.get("message") or replay.error or "the replay process produced no output"
