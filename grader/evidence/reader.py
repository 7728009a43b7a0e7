"""Reading what the sandboxed correctness child left behind, as evidence the parent can trust.

The child is hostile (its process runs the submission): every report file is validated with
the protocol's models (grader/harness/protocol.py) and a report that does not validate counts
as missing; tensors are read as plain numbers; whether the run started and finished is taken
from the progress pipe, which the submission can append to but not rewrite.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from grader.checks.plan import CallEvidence, InputBank, Plan, PlannedCheck
from grader.evidence.child_files import REPORT, TENSORS, ChildFolder
from grader.harness.protocol import MAX_OUTPUTS, CallReport, DoneReport, StepReport
from grader.report.document import ErrorKind, GradingError
from grader.sandbox.run import ChildOutcome
from grader.settings import GraderSettings, first_call_limit_s


class InfrastructureError(RuntimeError):
    """The grader or the machine failed; no verdict about the submission can be given."""


def _last_progress(outcome: ChildOutcome) -> str | None:
    """What the child was doing last, from its progress pipe, in words."""
    last = outcome.progress.last if outcome.progress is not None else None
    if last is None or last == "done":
        return None
    if last == "import":
        return "the import of the module"
    if last == "precompile":
        return ("the compile-only pass before the checks (each planned call made once, its Triton kernels "
                "compiled, not launched)")
    return f"call {last.removeprefix('call ')}"


def read_done(workdir: Path) -> DoneReport | None:
    """The child's validated ``done.json``, or None when it is missing or malformed.

    Raises:
        ChildFileRejected: it is not a regular file of the child's within its cap
            (grader/evidence/child_files.py).
    """
    raw = ChildFolder(workdir).read("done.json", REPORT)
    if raw is None:
        return None
    try:
        return DoneReport.model_validate_json(raw)
    except (ValidationError, ValueError):
        return None


def timeout_message(outcome: ChildOutcome, settings: GraderSettings, *, device: str, where: str | None,
                    first_input: str | None = None) -> str:
    """The words for a child stopped at its wall-clock limit, for the device it ran on.

    On a GPU, Triton compilation is left out of the limit up to the compile budget (the
    parent timed it from the child's progress pipe); the message says how much there was and
    whether the child was still compiling past the budget. On the CPU interpreter nothing is
    compiled: every program of the grid runs one after another in Python, so the advice there
    is about the number of programs and the work per element.
    """
    if outcome.first_call_timed_out:
        # The first call has the smallest input: taking seconds there is a loop that does not
        # end (a loop bound or stride that never moves), not slowness, so no advice on speed.
        call = f"{where}; " if where else ""
        return (f"did not return on {first_input or 'its first, smallest input'}: an infinite loop? ({call}the first"
                f" call has {first_call_limit_s(settings, device):g} CPU s of its own, compile time not counted)")
    during = f" during {where}" if where else ""
    message = f"did not finish within {settings.child_timeout_s:g} s (still running{during})"
    if outcome.cpu_s is not None:
        message = cpu_timeout_message(outcome, settings, during)
    if device == "cpu":
        if where and where.startswith("call"):
            message += (". On the CPU interpreter (TRITON_INTERPRET=1) each program of the grid runs one after"
                        " another in Python and each block operation is one NumPy call, so a grid of one tiny"
                        " program per element, or a Python-level loop over elements, is slow there; use blocks of"
                        " hundreds or thousands of elements")
        return message
    compiled = outcome.compile_s
    message += compile_cost_text(outcome)
    if outcome.compile_budget_exhausted:
        message += (f". It spent {compiled:.0f} s compiling Triton kernels, past the compile budget of"
                    f" {settings.compile_budget_s:g} s that is not counted in the limit: Triton compiles each new"
                    f" block size, dtype and alignment once, and a block holding a whole long row (or many"
                    f" autotune configs) takes long; loop over long rows in chunks of a few thousand elements")
    elif compiled > 0:
        message += (f"; {outcome.compile_excluded_s:.0f} s of Triton compilation were not counted"
                    f" (compile budget {settings.compile_budget_s:g} s)")
    return message


def compile_report(outcome: ChildOutcome) -> list[dict]:
    """The child's compilations, the longest first (ProgressLines.compile_report), or none."""
    report = getattr(outcome.progress, "compile_report", None)
    return report() if report is not None else []


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def compile_cost_text(outcome: ChildOutcome) -> str:
    """What the child was compiling when it was stopped (or, with nothing open, its costliest
    compilations), from its progress pipe: each kernel with its constexpr arguments (block
    sizes) and warps, how long by the parent's clock, and the memory the child reported. Empty
    when it compiled nothing."""
    report = compile_report(outcome)
    if not report:
        return ""
    open_ones = [entry for entry in report if entry.get("open")]
    shown = open_ones[:3] or report[:3]

    def one(entry: dict) -> str:
        settings = [f"{name}={value}" for name, value in entry.get("constants", {}).items()]
        if entry.get("num_warps"):
            settings.append(f"num_warps={entry['num_warps']}")
        memory = f", peak {_gib(entry['peak_rss_bytes'])} resident" if entry.get("peak_rss_bytes") else ""
        if entry.get("tree_peak_bytes"):
            memory += f" ({_gib(entry['tree_peak_bytes'])} with its compilers)"
        return f"{entry['kernel']} ({', '.join(settings) or 'no constexprs'}) for {entry['seconds']:.1f} s{memory}"

    head = "compiling then: " if open_ones else "its longest compilations: "
    more = f" (+{len(open_ones) - 3} more at once)" if len(open_ones) > 3 else ""
    return "; " + head + "; ".join(one(entry) for entry in shown) + more


def cpu_timeout_message(outcome: ChildOutcome, settings: GraderSettings, during: str) -> str:
    """The first words of a timeout under a CPU-time limit (grader/sandbox/child_limits.py CpuClock): which
    clock ran out, what was running and for how long in CPU and wall seconds, and whether the
    machine was loaded (so that a timeout under load reads as such, not as the kernel's fault)."""
    if outcome.timeout_clock == "wall":
        message = (f"did not finish within the wall-clock ceiling of "
                   f"{settings.child_timeout_s * settings.cpu_wall_ceiling_factor:g} s (not counting the time it "
                   f"waited for a CPU), having used {outcome.cpu_s:.1f} s of its {settings.child_timeout_s:g} s of CPU "
                   f"time (still running{during}; a process that waits or sleeps uses no CPU)")
    else:
        message = f"did not finish within {settings.child_timeout_s:g} s of CPU time (still running{during})"
    running, load = outcome.running or {}, outcome.load or {}
    if running.get("cpu_s") is not None:
        message += f"; that had run for {running['cpu_s']:.1f} s of CPU and {running['wall_s']:.1f} s of wall time"
    if load:
        share = load.get("child_cpu_share")
        state = "loaded" if load.get("loaded") else "not loaded"
        message += (f"; the machine was {state} (1-minute load average {load.get('load_1min')} on "
                    f"{load.get('cores')} cores" + (f", the run got {share:.0%} of a core" if share is not None else "")
                    + ")")
    return message


def timing_details(outcome: ChildOutcome) -> dict:
    """What a timeout's error carries beside its message: compile, CPU and wall seconds, the
    call running, the machine's load and the costliest compilations (all measured by the
    parent)."""
    details: dict = {"compile_s": round(outcome.compile_s, 3)} if outcome.compile_s else {}
    report = compile_report(outcome)
    if report:
        details["compilations"] = report[:8]
    if outcome.cpu_s is not None:
        details.update(cpu_s=outcome.cpu_s, wall_s=round(outcome.duration_s, 3), clock=outcome.timeout_clock,
                       running=outcome.running, load=outcome.load)
    return details


def child_error(outcome: ChildOutcome, workdir: Path, settings: GraderSettings, *, device: str = "cpu",
                first_input: str | None = None) -> GradingError | None:
    """The error of a child that did not finish normally, or None if it did.

    Raises:
        InfrastructureError: the harness never started (it announces ``import`` on its
            progress pipe before any submission code runs), so the sandbox or the child's
            start-up failed, not the submission.
    """
    where = _last_progress(outcome)
    during = f" during {where}" if where else ""
    # Memory first: a child at its memory limit spends its time in the kernel's reclaim, so a
    # time limit it meets there is the memory's doing (a 16 GiB allocation under a 2 GiB limit
    # met the first call's 5 CPU s on a loaded machine).
    if outcome.memory_exceeded:
        return GradingError(kind=ErrorKind.RESOURCE_LIMIT,
                            message=f"used more than {settings.memory_limit_bytes / 2**30:.3g} GiB of host memory{during}"
                                    + compile_cost_text(outcome),
                            details={"compilations": compile_report(outcome)[:8]} if compile_report(outcome) else {})
    if outcome.timed_out:
        return GradingError(kind=ErrorKind.TIMEOUT, message=timeout_message(outcome, settings, device=device, where=where,
                                                                            first_input=first_input),
                            details=timing_details(outcome))
    if outcome.output_exceeded:
        return GradingError(kind=ErrorKind.RESOURCE_LIMIT,
                            message=f"printed more than {settings.output_kill_bytes / 2**20:.3g} MiB of output{during}")
    if outcome.process_limit_hit:
        return GradingError(kind=ErrorKind.RESOURCE_LIMIT,
                            message=f"tried to run more than {settings.max_processes} processes or threads{during}")
    if outcome.progress is None or not outcome.progress.started:
        raise InfrastructureError(
            f"the sandboxed child failed before importing the submission (exit {outcome.returncode}): "
            f"{outcome.log.text[-1500:]}"
        )
    finished = outcome.progress.done and outcome.returncode == 0
    done = read_done(workdir)
    if done is not None and done.phase == "import":
        exc = done.exception
        kind = {"SystemExit": ErrorKind.EXITED, "MemoryError": ErrorKind.RESOURCE_LIMIT}.get(
            exc.type if exc else "", ErrorKind.IMPORT)
        return GradingError(kind=kind, message=f"importing the submission raised {exc.message if exc else '?'}",
                            traceback=(exc.traceback[-3000:] if exc and exc.traceback else None))
    if done is not None and done.phase == "lookup":
        return GradingError(kind=ErrorKind.MISSING_FUNCTION,
                            message=f"after import, the module has no callable {done.missing!r}")
    if done is not None and done.phase == "fatal":
        return GradingError(kind=ErrorKind.CRASH, message=f"a CUDA error poisoned the process{during}; later checks did not run")
    if finished:
        return None
    # The harness did not announce the end of the run on its pipe: whatever files the child
    # left, the run did not finish.
    if outcome.signal is not None:
        try:
            name = signal.Signals(outcome.signal).name
        except ValueError:
            name = f"signal {outcome.signal}"
        return GradingError(kind=ErrorKind.CRASH, message=f"the process was killed by {name}{during}")
    return GradingError(
        kind=ErrorKind.EXITED,
        message=f"the process exited with status {outcome.returncode}{during} before the run finished "
                "(sys.exit/os._exit in the submission?)",
    )


def call_context(outcome: ChildOutcome, plan: Plan, kind: ErrorKind, crash_hint: str) -> str:
    """For an error that happened inside a call: that call's inputs, and a hint for crashes."""
    last = outcome.progress.last if outcome.progress is not None else None
    if not last or not last.startswith("call ") or kind not in (ErrorKind.CRASH, ErrorKind.EXITED, ErrorKind.TIMEOUT):
        return ""
    call = plan.calls().get(last.removeprefix("call ").split("@", 1)[0])
    if call is None:
        return ""
    return f". The call's inputs: {call.label}." + (crash_hint if kind is ErrorKind.CRASH else "")


#: Tensors one step file may hold per planned round: the output and its replay per returned
#: tensor (protocol.MAX_OUTPUTS each) and each input base after the call, with room to spare.
TENSORS_PER_ROUND = 4 * MAX_OUTPUTS + 16


def step_tensor_bytes(step: PlannedCheck, bank: InputBank | None) -> int:
    """The most bytes the tensors of one step's file may take: for each planned round, each
    output's oracle size at 8 bytes an element, twice (the output and its replay), times
    ``OUTPUT_SLACK`` for an output of the wrong shape or dtype, and each input base the round
    saves after the call (from `bank`; without one, the outputs' bound again); plus 16 MiB.
    An honest step's file is well inside it; a larger one is refused before it is read."""
    total = 16 << 20
    for call in step.calls:
        rounds = len(call.round_ids)
        outputs = sum(int(expectation.expected.numel()) for expectation in call.expectations(0)) if call.expected else 0
        total += rounds * outputs * 8 * 2 * OUTPUT_SLACK
        if call.save_inputs_after:
            bases = {spec.base for spec in call.tensors()}
            if bank is not None:
                total += rounds * sum(int(bank.bases[b].numel() * bank.bases[b].element_size())
                                      for b in bases if b in bank.bases)
            else:
                total += rounds * outputs * 8 * 2 * OUTPUT_SLACK
    return total


#: How many times an output's honest size (at 8 bytes an element) a step file may hold per output.
OUTPUT_SLACK = 4


def read_evidence(steps: list[PlannedCheck], workdir: Path,
                  bank: InputBank | None = None) -> tuple[dict[str, CallEvidence], set[str]]:
    """Per-round evidence of every step the child finished, keyed by round id, and the names of
    the checks whose step left a report file. ``steps`` are the checks of the child's plan, in
    its order (Plan.steps). Malformed reports count as missing.

    Linear in what the child wrote, and bounded by the plan: only the rounds the step planned
    are taken (a report of any other id, or a second report of one, is ignored), each tensor
    name is split once and filed under its round (no scan of every name per call), and a
    step file holding more tensors than ``TENSORS_PER_ROUND`` per planned round, or more
    bytes than ``step_tensor_bytes`` (sized from the plan and `bank`, the input bank), is
    refused before a tensor is built (ChildFolder.load_tensors).

    Raises:
        ChildFileRejected: a report or tensor file is not a regular file of the child's
            within its cap (grader/evidence/child_files.py), or holds more tensors than its step can.
    """
    calls: dict[str, CallEvidence] = {}
    finished_steps: set[str] = set()
    folder = ChildFolder(workdir)
    tensor_bytes_left = TENSORS.cap_bytes  # every step file of the grading together
    for index, step_check in enumerate(steps):
        raw = folder.read(f"step_{index}.json", REPORT)
        if raw is None:
            continue
        finished_steps.add(step_check.name)
        try:
            step = StepReport.model_validate_json(raw)
        except (ValidationError, ValueError):
            continue
        planned = {round_id for call in step_check.calls for round_id in call.round_ids}
        try:
            tensors = folder.load_tensors(f"step_{index}.safetensors",
                                          max_bytes=min(tensor_bytes_left, step_tensor_bytes(step_check, bank)),
                                          max_tensors=TENSORS_PER_ROUND * max(1, len(planned))) or {}
        except ValueError:  # a corrupt file reads as "no outputs"
            tensors = {}
        tensor_bytes_left -= sum(t.numel() * t.element_size() for t in tensors.values())
        by_round: dict[str, dict[str, Any]] = {}
        for name, tensor in tensors.items():
            round_id, _, key = name.partition(":")
            if round_id in planned:
                by_round.setdefault(round_id, {})[key] = tensor
        for entry in step.calls[: 2 * len(planned)]:  # the harness writes one report per round
            try:
                report = CallReport.model_validate(entry)
            except ValidationError:
                continue
            if report.id not in planned or report.id in calls:
                continue
            own = by_round.get(report.id, {})
            calls[report.id] = CallEvidence(
                report=report,
                out=own.get("out"),
                bases_after={key.removeprefix("base_after:"): value for key, value in own.items()
                             if key.startswith("base_after:")},
                replay_out=own.get("replay_out"),
                more_outs=[own.get(f"out{k}") for k in range(1, 1 + min(len(report.more_outputs), MAX_OUTPUTS))],
                more_replay_outs=_numbered(own, "replay_out"),
            )
    return calls, finished_steps


def _numbered(tensors: dict, key: str) -> list:
    """``key1``, ``key2``, ... while present (the further outputs of a tuple-returning call)."""
    found: list = []
    while f"{key}{len(found) + 1}" in tensors and len(found) < 7:
        found.append(tensors[f"{key}{len(found) + 1}"])
    return found


def call_level_error(evidence_calls: dict[str, CallEvidence]) -> GradingError | None:
    """An error a call raised that ends the run: SystemExit, or MemoryError."""
    for evidence in evidence_calls.values():
        report = evidence.report
        exc = report.exception if report else None
        if report is None or exc is None:
            continue
        if exc.exit:
            return GradingError(kind=ErrorKind.EXITED, message=f"the submission raised SystemExit in call {report.id}")
        if exc.type == "MemoryError":
            return GradingError(kind=ErrorKind.RESOURCE_LIMIT, message=f"ran out of memory in call {report.id}")
    return None
