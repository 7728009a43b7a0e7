"""What crosses a process boundary in a grading: the result document, exit codes, error kinds.

One typed definition (pydantic) used by every process that writes or reads a result:

- the grader parent writes it (``grader check --json``: stdout of the process the worker runs);
- the worker (submissions/grading.py) validates it and stores it;
- the API (api/schemas.py) serves parts of it, and ``grader submit`` renders it.

Torch-free: the worker and the API import this module. Validation is strict about types and
about consistency (a ``passed`` verdict needs every check passed or skipped and at least one
that ran), so a malformed or contradictory document from a broken grader is refused, never
stored as a pass.

Floats: a value that is not finite (an ``err/tol`` of infinity for NaN outputs) is written as
the JSON strings ``"Infinity"``/``"NaN"`` (valid JSON, unlike Python's bare ``Infinity``) and
read back as floats.
"""

from __future__ import annotations

import enum
import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from grader.report.benchmark_result import BenchmarkResult, DocumentModel
from grader.report.speed import RowSpeed, furthest_from_floor, row_speeds, speed_line

#: Version of the result document's shape. 2: typed contract (checks carry ``details``;
#: ``log.omitted_bytes``; ``notes``).
SCHEMA_VERSION = 2


class ExitCode(enum.IntEnum):
    """Exit status of ``grader check``; the worker maps it to a stored verdict or a retry."""

    PASSED = 0
    FAILED = 1
    #: The submission caused the error (syntax, import, timeout, crash, ...): a verdict.
    SUBMISSION_ERROR = 2
    #: The grader or the machine broke; no verdict. The worker retries.
    INFRASTRUCTURE = 3


class GradeJob(BaseModel):
    """The job a warm ``grader check --job-on-stdin`` process reads (one JSON line on stdin):
    the worker starts that process before a job arrives, so that Python, torch and the grader
    are loaded when it does (submissions/grading.py ``WarmGrader``).

    Attributes:
        source: path of the submission's file (in the worker's private grading folder).
        seed: input seed.
        assignment: a name from the manifest (grader/manifest.py).
    """

    model_config = ConfigDict(extra="forbid")

    source: str = Field(min_length=1, max_length=4096)
    seed: int
    assignment: str = Field(min_length=1, max_length=100)


class BenchmarkExitCode(enum.IntEnum):
    """Exit status of ``grader benchmark``."""

    SCORED = 0
    NO_SCORE = 1  # timed, but a flag (wrong output, implausible time, ...) denies the score
    ERROR = 2  # the benchmark could not run
    NO_GPU = 3  # no CUDA device: no timings are reported


class Verdict(enum.StrEnum):
    """Outcome of one grading."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"

    @property
    def exit_code(self) -> ExitCode:
        """The exit code ``grader check`` returns with this verdict."""
        return {Verdict.PASSED: ExitCode.PASSED, Verdict.FAILED: ExitCode.FAILED}.get(self, ExitCode.SUBMISSION_ERROR)


class ErrorKind(enum.StrEnum):
    """Why a grading ended in ``error`` (or, for ``infrastructure``, with no verdict at all)."""

    SYNTAX = "syntax"  # not UTF-8, empty, or not Python
    MISSING_FUNCTION = "missing_function"  # the assignment's function is not defined or not callable
    IMPORT = "import"  # importing the module raised
    TIMEOUT = "timeout"  # the sandboxed child ran past its wall-clock limit
    CRASH = "crash"  # killed by a signal, or a CUDA error poisoned the process
    EXITED = "exited"  # sys.exit / os._exit in the submission
    RESOURCE_LIMIT = "resource_limit"  # memory, processes, output or the grading folder's space over the limit
    #: a file the grader reads back was replaced (a link, FIFO, device, folder, or over its cap)
    TAMPERED = "tampered"
    #: the trusted side failed reading, parsing or checking what the run produced (its files,
    #: pipes or text): the submission's error, charged (docs/security.md, "Who pays")
    UNREADABLE_OUTPUT = "unreadable_output"
    INFRASTRUCTURE = "infrastructure"  # the grader or the machine failed: no verdict


class GradingError(DocumentModel):
    """Why a grading ended in ``error``.

    Attributes:
        kind: the class of error (ErrorKind).
        message: one paragraph for the student, naming what happened and where.
        line, column: for syntax errors, where (1-based).
        traceback: the relevant end of a traceback the submission raised, if any.
        details: further machine-readable facts (e.g. ``byte_offset``, ``function``, ``call``).
    """

    kind: ErrorKind
    message: str
    line: int | None = None
    column: int | None = None
    traceback: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class CheckOutcome(DocumentModel):
    """The verdict of one named check.

    Attributes:
        name: the check's name (docs/checks.md lists them per assignment).
        passed: the check ran and passed. Never true for a skipped check.
        skipped: the check did not run (not applicable on this device, or the run ended first);
            ``message`` says why; it never counts as passed.
        message: what was compared and how it went, in words.
        cases: how many outputs were compared against the oracle.
        max_abs_err: the largest |got - expected| over the compared elements (finite ones).
        max_err_over_tolerance: the largest |got - expected| / allowed; above 1 fails; infinity
            when an output is NaN or infinite where the oracle is finite.
        tolerance: the bound and where it comes from (docs/checks.md).
        details: check-specific numbers (launches, calls, raised, ...).
    """

    name: str = Field(min_length=1, max_length=200)
    passed: bool
    skipped: bool = False
    message: str
    cases: int | None = None
    max_abs_err: float | None = None
    max_err_over_tolerance: float | None = None
    tolerance: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _skipped_never_passes(self) -> CheckOutcome:
        if self.skipped and self.passed:
            raise ValueError(f"check {self.name!r} is both skipped and passed")
        return self


class CapturedLog(DocumentModel):
    """What the submission printed (stdout and stderr), head and tail kept.

    Attributes:
        text: the kept text; where bytes were dropped it holds a marker line saying how many.
        truncated: some output was dropped.
        total_bytes: how many bytes the submission printed in all.
        omitted_bytes: how many of them are not in ``text``.
    """

    text: str = ""
    truncated: bool = False
    total_bytes: int = Field(default=0, ge=0)
    omitted_bytes: int = Field(default=0, ge=0)


class GpuClocks(DocumentModel):
    """One reading of a GPU's state (nvidia-smi), taken when a grading starts and when it ends,
    so that a figure measured at low clocks or a hot card can be told apart afterwards.

    Attributes:
        sm_mhz: streaming-multiprocessor clock, MHz.
        memory_mhz: memory clock, MHz.
        temperature_c: GPU temperature, degrees Celsius.
        power_w: board power draw, watts.
    """

    sm_mhz: int | None = None
    memory_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None


class GpuIdentity(DocumentModel):
    """Which physical GPU graded a submission (nvidia-smi's numbering and identity).

    Attributes:
        name: the model, e.g. ``NVIDIA H200``; boards compare timings of one model only.
        index: nvidia-smi's index of the card on its host (not the process's ``cuda:0``).
        uuid: the card's UUID (``GPU-...``), stable across reboots and index changes.
        pci_bus_id: the card's PCI address on its host.
        driver: the driver version.
        clocks_start, clocks_end: readings when the grading started and ended.
    """

    name: str = Field(max_length=200)
    index: int | None = None
    uuid: str | None = Field(default=None, max_length=100)
    pci_bus_id: str | None = Field(default=None, max_length=100)
    driver: str | None = Field(default=None, max_length=100)
    clocks_start: GpuClocks | None = None
    clocks_end: GpuClocks | None = None


class Placement(DocumentModel):
    """Where a grading ran: the host, the host cores its processes were bound to, the GPU.

    Attributes:
        host: the host name of the machine that graded (left out of what students read).
        cpus: the host cores (Linux CPU numbers) the grader and its children could run on.
        gpu: the GPU, when the grading used one.
    """

    host: str | None = Field(default=None, max_length=255)
    cpus: list[int] = Field(default_factory=list)
    gpu: GpuIdentity | None = None


class CompileCost(BaseModel):
    """One Triton compilation of the check child (GPU; the CPU interpreter compiles nothing),
    as the parent saw it on the child's progress pipe (grader/sandbox/progress.py
    ProgressLines.compile_report).

    Attributes:
        kernel: the @triton.jit function's name.
        constants: its constexpr arguments by name (block sizes among them).
        num_warps / num_stages: the compile options, when known.
        seconds: wall time between the child's ``compiling`` and ``compiled`` lines, by the
            parent's clock (so far, for one still open).
        rss_bytes / peak_rss_bytes: the child's resident and peak resident memory when it
            ended, as the child reported it (several compilations may run at once: the
            process's figures, not this one's alone), bytes.
        tree_peak_bytes: the most the child and its subprocesses (ptxas) held at once up to
            this compilation's end, sampled every 0.1 s during the compile-only pass, bytes:
            what a memory limit meets.
        open: still compiling when the child ended.
    """

    model_config = ConfigDict(extra="forbid")

    kernel: str
    constants: dict[str, Any] = Field(default_factory=dict)
    num_warps: int | None = None
    num_stages: int | None = None
    seconds: float = 0.0
    rss_bytes: int = 0
    peak_rss_bytes: int = 0
    tree_peak_bytes: int = 0
    open: bool = False


class ReportSummary(DocumentModel):
    """What a report leads with (the page, ``grader check``/``grader submit`` and the JSON
    document all show this one object, derived by ``summarize``): the verdict, the first check
    to fix, its smallest failing input with the worst element's got and expected values, and
    the hint.

    Attributes:
        verdict: the run's verdict.
        line: the verdict in one line (``failed: fix example_two_element first; 9/12 checks
            passed``); what ``grader check --quiet`` prints.
        passed, total, not_run: checks passed, checks reported, checks skipped.
        check: the first failed check in the report's order (the checks run simplest first),
            or None when none failed.
        input: that check's smallest failing input in words (``(4, 1000) float16``), when its
            values were compared.
        index: the worst element of that input's output (0-based), or None.
        got, expected, allowed: the output there, the fp64 oracle there, the allowed
            |got - expected| there (output units; NaN/inf as they are).
        problem: what went wrong, in words: the check's message without its hint, or the
            error's message.
        hint: what to look at (the check's hint or diagnosis), or None.
        furthest_from_floor: for a passed grading with a benchmark (GPU), the rows furthest
            from their floor, furthest first (grader/report/speed.py: achieved GB/s, TFLOP/s and
            fraction of the floor under CUDA-graph timing); empty otherwise.
        speed: the same in one sentence (grader.report.speed.speed_line), or None.
    """

    verdict: Verdict
    line: str
    passed: int = 0
    total: int = 0
    not_run: int = 0
    check: str | None = None
    input: str | None = None
    index: list[int] | None = None
    got: float | None = None
    expected: float | None = None
    allowed: float | None = None
    problem: str | None = None
    hint: str | None = None
    furthest_from_floor: list[RowSpeed] = Field(default_factory=list)
    speed: str | None = None


HINT_MARK = " Hint: "


def summarize(document: ResultDocument) -> ReportSummary:
    """The summary of `document` (ReportSummary): one derivation for every place a report
    is shown. Reads the first failed check's ``details["failure"]`` and ``details["hint"]``
    (grader/checks/evaluate.py writes them); a check without a structured hint has none (its message
    is never split for one: it may hold the submission's own text). A passed grading with a
    benchmark names the rows furthest from their floor (grader.report.speed.furthest_from_floor)."""
    checks = document.checks
    passed = sum(1 for c in checks if c.passed)
    not_run = sum(1 for c in checks if c.skipped)
    counts = f"{passed}/{len(checks)} checks passed" + (f", {not_run} not run" if not_run else "")
    first = next((c for c in checks if not c.passed and not c.skipped), None)
    fields: dict[str, Any] = {"verdict": document.verdict, "passed": passed, "total": len(checks),
                              "not_run": not_run}
    if first is not None:
        # The hint only from the grader's structured field: the message may hold the
        # submission's own text (an exception's message), so it is never split for one.
        given = first.details.get("hint")
        hint = given if isinstance(given, str) else ""
        problem = first.message
        if hint and problem.endswith(hint):  # a diagnosis is part of the sentence it ends
            problem = problem[: -len(hint)].rstrip()
        if hint and problem.endswith(HINT_MARK.strip()):
            problem = problem[: -len(HINT_MARK.strip())].rstrip()
        failure = first.details.get("failure")
        if isinstance(failure, dict):
            index = failure.get("index")
            fields.update(input=failure.get("input") if isinstance(failure.get("input"), str) else None,
                          index=[int(i) for i in index] if isinstance(index, list) else None,
                          **{key: _number(failure.get(key)) for key in ("got", "expected", "allowed")})
        fields.update(check=first.name, problem=problem.strip() or first.message, hint=hint.strip() or None)
        line = f"{document.verdict.value}: fix {first.name} first; {counts}"
        if document.error is not None:
            line += f"; then the run ended: {document.error.kind.value}"
    elif document.error is not None:
        fields.update(problem=document.error.message)
        line = f"{document.verdict.value} ({document.error.kind.value}): {_first_sentence(document.error.message)}"
    else:
        line = f"{document.verdict.value}: {counts}"
    if document.verdict is Verdict.PASSED and document.benchmark is not None:
        speeds = row_speeds(document.benchmark)
        fields.update(furthest_from_floor=furthest_from_floor(speeds), speed=speed_line(speeds))
    return ReportSummary(line=line, **fields)


#: How a stored document writes a non-finite float in ``details`` (``ser_json_inf_nan="strings"``:
#: an untyped field reads back as this text, not as a float).
_NON_FINITE_TEXT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _number(value: Any) -> float | None:
    if isinstance(value, str):  # a stored NaN/inf (issue 38: the summary said "got ?")
        return _NON_FINITE_TEXT.get(value)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _first_sentence(text: str, limit: int = 200) -> str:
    sentence = re.split(r"(?<=[.?!])\s", text.strip(), maxsplit=1)[0]
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


class ResultDocument(DocumentModel):
    """The whole outcome of one ``grader check`` run (docs/architecture.md).

    Raises (on validation):
        pydantic.ValidationError: wrong types, unknown keys, or a contradiction: ``passed``
            with a failed check or with no check that ran; ``error`` without an error object;
            an error object with another verdict.
    """

    schema_version: int = Field(default=SCHEMA_VERSION, alias="schema")
    assignment: str
    verdict: Verdict
    #: Required with ``error``; with ``failed``, what ended the run after checks had failed.
    error: GradingError | None = None
    checks: list[CheckOutcome] = Field(default_factory=list)
    benchmark: BenchmarkResult | None = None
    device: str = ""
    versions: dict[str, str | None] = Field(default_factory=dict)
    seed: int = 0
    sandbox: str = ""
    duration_s: float = 0.0
    timings_s: dict[str, float] = Field(default_factory=dict)
    limits: dict[str, Any] | None = None
    #: The host, host cores and GPU that graded (grader/sandbox/placement.py).
    placement: Placement | None = None
    log: CapturedLog = Field(default_factory=lambda: CapturedLog())
    #: Things the student should know about how the run went that are not check verdicts
    #: (e.g. an autotuner narrowed to its first config under the CPU interpreter).
    notes: list[str] = Field(default_factory=list)
    #: The check child's Triton compilations, the longest first (GPU runs; at most 32).
    compilations: list[CompileCost] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _summary_is_derived(cls, data: Any) -> Any:
        # ``summary`` is written with the document but always derived again from its checks
        # (summarize): a stored or forged one is never believed.
        if isinstance(data, dict) and "summary" in data:
            data = {key: value for key, value in data.items() if key != "summary"}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def summary(self) -> ReportSummary:
        """What the report leads with (``summarize``); serialised with the document."""
        return summarize(self)

    @model_validator(mode="after")
    def _consistent(self) -> ResultDocument:
        if self.verdict is Verdict.ERROR and self.error is None:
            raise ValueError("verdict 'error' needs an error object")
        # A run that showed failures and then ended early (e.g. a later call timed out) is
        # ``failed`` with the error reported beside the failures; a pass has no error.
        if self.verdict is Verdict.PASSED and self.error is not None:
            raise ValueError("verdict 'passed' with an error object")
        if self.verdict is Verdict.PASSED:
            if not any(c.passed for c in self.checks):
                raise ValueError("verdict 'passed' without any check that ran and passed")
            if any(not c.passed and not c.skipped for c in self.checks):
                raise ValueError("verdict 'passed' although a check failed")
        if self.verdict is Verdict.FAILED and not any(not c.passed and not c.skipped for c in self.checks):
            raise ValueError("verdict 'failed' without a failed check")
        return self

    @property
    def exit_code(self) -> ExitCode:
        """The exit code ``grader check`` returns for this document."""
        return self.verdict.exit_code

    @property
    def headline_value(self) -> float | None:
        """The ranked number (a positive finite float), or None."""
        if self.verdict is not Verdict.PASSED or self.benchmark is None or self.benchmark.headline is None:
            return None
        value = self.benchmark.headline.value
        return value if value is not None and math.isfinite(value) and value > 0 else None

    def to_json(self, *, indent: int | None = 2) -> str:
        """Strict JSON (non-finite floats as strings), with ``schema`` as the version key."""
        return self.model_dump_json(by_alias=True, indent=indent)
