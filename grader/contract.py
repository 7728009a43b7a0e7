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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    RESOURCE_LIMIT = "resource_limit"  # memory, processes or output over the limit
    INFRASTRUCTURE = "infrastructure"  # the grader or the machine failed: no verdict


class _Document(BaseModel):
    """Base of every contract model: unknown keys refused, non-finite floats as strings."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings", populate_by_name=True)


class GradingError(_Document):
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


class CheckOutcome(_Document):
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


class CapturedLog(_Document):
    """What the submission printed (stdout and stderr), head and tail kept.

    Attributes:
        text: the kept text; where bytes were dropped it holds a marker line saying how many.
        truncated: some output was dropped.
        total_bytes: how many bytes the submission printed in all.
        omitted_bytes: how many of them are not in ``text``.
    """

    text: str = ""
    truncated: bool = False
    total_bytes: int = Field(0, ge=0)
    omitted_bytes: int = Field(0, ge=0)


class Headline(_Document):
    """The ranked number of a benchmark, or why there is none.

    Attributes:
        name: what the value is (e.g. ``geomean_speedup_vs_baseline_graph``).
        value: the number (higher is better), or None when the kernel earns no score.
        baseline: the named comparison the ratio is taken against.
        method: the timing method the value comes from (``graph``).
        rows: how many benchmark rows the value summarises.
        reason: why there is no value (None when there is one).
    """

    name: str
    value: float | None = None
    baseline: str | None = None
    method: str | None = None
    rows: int = 0
    reason: str | None = None


class BenchmarkRow(BaseModel):
    """One row of the ``benchmark`` object (grader/benchmark/score.py ``assemble`` writes it).

    Attributes:
        id: ``<shape>/<dtype>`` (``4096x4096/float16``).
        shape / dtype: the row's inputs as bench.py's ``make_inputs`` reads them.
        floor: the row's floor by kind (score.row_floor: ``kind``, ``s_min``, ``s_two_pass``,
            ``bytes_min``, ``flops``, the measured bandwidth and peak it used, ``what``).
        bytes_min / bytes_two_pass / floor_s_min / floor_s_two_pass: the same, flat (seconds).
        impls: implementation -> its statistics, verification and fractions of the floor.
        ratio_student_over_baseline / speedup_vs_baseline: per timing method (event, graph).
        flags: why the row is not ranked (empty: ranked); ranked: whether it counts.
        scope: what was timed, in words.

    Extra keys are kept (documents stored by earlier versions carry others).
    """

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="strings")

    id: str = ""
    shape: list[int] = Field(default_factory=list)
    dtype: str = ""
    floor: dict[str, Any] | None = None
    bytes_min: int | None = None
    bytes_two_pass: int | None = None
    floor_s_min: float | None = None
    floor_s_two_pass: float | None = None
    impls: dict[str, dict[str, Any]] = Field(default_factory=dict)
    ratio_student_over_baseline: dict[str, float | None] = Field(default_factory=dict)
    speedup_vs_baseline: dict[str, float | None] = Field(default_factory=dict)
    student_bandwidth_fraction_min: dict[str, float | None] = Field(default_factory=dict)
    streaming_probe: dict[str, Any] | None = None
    flags: list[str] = Field(default_factory=list)
    ranked: bool = False
    scope: str = ""


class BenchmarkResult(BaseModel):
    """The ``benchmark`` object of a result document (grader/benchmark).

    Only the headline and the error are read by other processes (the leaderboard ranks
    ``headline.value``); the rows are typed (``BenchmarkRow``); further keys (environment,
    measured peaks, options) are stored and shown as they are.
    """

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="strings")

    headline: Headline | None = None
    error: str | None = None
    rows: list[BenchmarkRow] = Field(default_factory=list)


class ResultDocument(_Document):
    """The whole outcome of one ``grader check`` run (docs/architecture.md).

    Raises (on validation):
        pydantic.ValidationError: wrong types, unknown keys, or a contradiction: ``passed``
            with a failed check or with no check that ran; ``error`` without an error object;
            an error object with another verdict.
    """

    schema_version: int = Field(SCHEMA_VERSION, alias="schema")
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
    log: CapturedLog = Field(default_factory=CapturedLog)
    #: Things the student should know about how the run went that are not check verdicts
    #: (e.g. an autotuner narrowed to its first config under the CPU interpreter).
    notes: list[str] = Field(default_factory=list)

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
