"""API schemas (pydantic): the wire contract of the HTTP API, separate from the ORM models
in submissions/models.py (api/presenters.py maps one to the other).

This module imports pydantic only, so the command-line client (client/, installed without
the service's dependencies) parses the API's answers with these same models.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from grader.manifest import MANIFESTS
from grader.stages import GradingStage

Role = Literal["student", "ta", "instructor"]
StaffRoleName = Literal["instructor", "ta"]
Verdict = Literal["passed", "failed", "error"]
Status = Literal["queued", "running", "passed", "failed", "error"]
#: The statuses that end a grading (a verdict, or an error): nothing changes after them.
TERMINAL = frozenset({"passed", "failed", "error"})

#: The largest value of a PostgreSQL ``INTEGER`` column (every id of the schema); api/params.py
#: bounds path and query parameters with it, the request bodies below their id fields.
MAX_DB_INT = 2**31 - 1


def storable_text_problem(value: str) -> str | None:
    """Why the database cannot store `value` (None: it can): PostgreSQL text cannot hold a
    NUL character (U+0000), and a lone surrogate (U+D800..U+DFFF, which JSON's ``\\ud800``
    escapes can produce) is not UTF-8 at all. The one rule for every text the API stores or
    filters on; forms and roster rows apply it too (api/pages/security.py,
    submissions/roster.py)."""
    if "\x00" in value:
        return "must not contain a NUL character (U+0000)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must not contain a lone surrogate (U+D800..U+DFFF)"
    return None


def _storable(value: str) -> str:
    problem = storable_text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


#: Text that the database can store (see `storable_text_problem`): a 422 naming the field
#: otherwise. Every text field of a request body and every text query parameter uses it.
StoredText = Annotated[str, AfterValidator(_storable)]


class ErrorBody(BaseModel):
    """The body of every error response: ``{"error": {"code": ..., "message": ..., ...}}``."""

    code: str = Field(description="stable machine-readable code, e.g. `upload_too_large`")
    message: str
    model_config = ConfigDict(extra="allow")


class ErrorResponse(BaseModel):
    error: ErrorBody


# ------------------------------------------------------------------------------ me


class Me(BaseModel):
    """Who the token belongs to. `id` is None for the bootstrap instructor."""

    role: Role
    id: int | None
    name: str


class TokenIssued(BaseModel):
    """A new token (shown only here; only its hash is stored). The old one no longer works."""

    kind: Literal["student", "staff"]
    id: int
    name: str
    token: str


# ------------------------------------------------------------------------- students


class StudentCreate(BaseModel):
    name: StoredText = Field(min_length=1, max_length=200)
    email: StoredText | None = Field(None, max_length=320, description="optional, unique")
    external_id: StoredText | None = Field(None, max_length=100,
                                    description="the institution's student id; optional, unique")


class StudentCreated(BaseModel):
    """A new student; `token` is shown only here (only its hash is stored)."""

    id: int
    name: str
    token: str
    email: str | None = None
    external_id: str | None = None


class StudentRead(BaseModel):
    id: int
    name: str
    email: str | None = None
    external_id: str | None = None
    created_at: dt.datetime
    token_rotated_at: dt.datetime | None = None


class RosterImported(BaseModel):
    """A roster import: the students created (with their tokens) and the rows that matched
    existing students (who keep their tokens)."""

    created: list[StudentCreated]
    existing: list[StudentRead]


# ---------------------------------------------------------------------------- staff


class StaffCreate(BaseModel):
    name: StoredText = Field(min_length=1, max_length=200)
    role: StaffRoleName


class StaffCreated(BaseModel):
    """A new staff account; `token` is shown only here."""

    id: int
    name: str
    role: StaffRoleName
    token: str


class SlipDaySpendRead(BaseModel):
    assignment: str
    submission_id: int
    days: int


class SlipDaysRead(BaseModel):
    """A student's slip days for the term."""

    student_id: int
    budget: int
    used: int
    left: int
    spent: list[SlipDaySpendRead]


class SlipDaysUpdate(BaseModel):
    """A new slip-day budget for the student, and why (audited)."""

    model_config = ConfigDict(extra="forbid")

    days: int = Field(ge=0, le=365)
    reason: str = Field(min_length=1, max_length=2000)


class StaffRead(BaseModel):
    id: int
    name: str
    role: StaffRoleName
    created_at: dt.datetime
    token_rotated_at: dt.datetime | None = None


# ---------------------------------------------------------------------- assignments


class SpeedThreshold(BaseModel):
    """`points` for a headline speedup of at least `min_speedup`."""

    min_speedup: float = Field(gt=0, allow_inf_nan=False)
    points: float = Field(ge=0, allow_inf_nan=False)


class CheckPointsRead(BaseModel):
    """The points one correctness check carries."""

    name: str
    points: float


class Points(BaseModel):
    """score = correctness_points (every check passed; otherwise the points of the checks
    that passed) + the points of the highest speed threshold the headline speedup reaches
    (docs/course.md, "Points")."""

    correctness_points: float
    speed_points: list[SpeedThreshold]
    max_points: float
    check_points: list[CheckPointsRead] = Field(
        default_factory=list, description="points per check, summing to correctness_points "
        "(the assignment folder's points.toml, or staff's override, scaled); empty: all or "
        "nothing")
    check_points_overridden: bool = Field(False, description="staff set the points per check")
    counting: Literal["best", "latest"] = Field(
        "best", description="which submission gives a student's grade")


class LateCurveRead(BaseModel):
    """Late policy ``penalty``: `percent` off per `unit` started after the due date in force
    (and slip days); past `cap` units the upload earns 0 (`after_cap` zero) or is refused."""

    percent: float
    unit: Literal["hour", "day"]
    cap: float | None = Field(description="null: no cap")
    after_cap: Literal["zero", "refuse"]


class AssignmentUpdate(BaseModel):
    """Settings to change (only the fields sent change; `null` clears a date or a limit).
    Times are UTC (or carry an offset)."""

    model_config = ConfigDict(extra="forbid")

    opens_at: AwareDatetime | None = None
    due_at: AwareDatetime | None = None
    late_policy: Literal["refuse", "mark_late", "penalty"] | None = None
    late_percent: float | None = Field(None, ge=0, le=100, allow_inf_nan=False,
                                       description="penalty per late_unit started")
    late_unit: Literal["hour", "day"] | None = None
    late_cap: float | None = Field(None, gt=0, le=100_000, allow_inf_nan=False,
                                   description="units late after which late_after_cap "
                                   "applies; null: no cap")
    late_after_cap: Literal["zero", "refuse"] | None = None
    counting: Literal["best", "latest"] | None = None
    check_points: dict[str, Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)]] \
        | None = Field(None, max_length=200, description="points per check (every check "
                       "of the assignment); correctness_points becomes their sum; null: "
                       "back to the assignment folder's points")
    max_submissions: int | None = Field(None, ge=1, le=1_000_000)
    rate_limit_submissions: int | None = Field(None, ge=1, le=1_000_000,
                                               description="null: the service's default")
    rate_limit_window_s: float | None = Field(None, gt=0, le=366 * 86400,
                                              description="null: the service's default")
    leaderboard_visible: bool | None = None
    correctness_points: float | None = Field(None, ge=0, le=1_000_000, allow_inf_nan=False)
    speed_points: list[SpeedThreshold] | None = Field(None, max_length=50)

    @field_validator("late_policy", "leaderboard_visible", "correctness_points", "speed_points",
                     "late_after_cap", "counting")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        # null is meaningful for dates and limits only; these fields always have a value.
        if value is None:
            raise ValueError("must not be null")
        return value


class Quota(BaseModel):
    """The calling student's use of the assignment, and their own due date."""

    submissions_used: int = Field(description="infrastructure errors do not count")
    submissions_left: int | None = Field(description="null: no maximum")
    due_at: dt.datetime | None = Field(None, description="your due date in force (UTC): your "
                                       "extension's, else the class-wide one")
    extension: bool = Field(False, description="you have an extension of this assignment")
    slip_days_budget: int = Field(0, description="your slip days for the term")
    slip_days_left: int = Field(0, description="slip days you could spend on this assignment "
                                "now (those left, plus any already spent on it)")
    slip_days_spent: int = Field(0, description="slip days spent on this assignment")
    late_now: str | None = Field(None, description="how late an upload now would be, to the "
                                 "second (\"1 day 2 h late\"); null: on time")


class ExtensionGrant(BaseModel):
    """A student's extension: a new due date or extra days past the class-wide one (exactly
    one), and why. Replaces the student's earlier extension of the assignment."""

    model_config = ConfigDict(extra="forbid")

    due_at: AwareDatetime | None = Field(None, description="the student's own due date")
    extra_days: float | None = Field(None, gt=0, le=366, allow_inf_nan=False,
                                     description="days past the class-wide due date")
    reason: str = Field(min_length=1, max_length=2000, description="e.g. an accommodation")


class ExtensionRead(BaseModel):
    assignment: str
    student_id: int
    student_name: str
    due_at: dt.datetime | None = Field(description="the extension's own date, if it sets one")
    extra_days: float | None
    due_in_force: dt.datetime | None = Field(
        description="the student's due date now (the later of the class-wide one and the "
                    "extension's; moves with the class-wide one when given in days)")
    reason: str
    granted_by: str
    granted_at: dt.datetime


class ExtensionList(BaseModel):
    extensions: list[ExtensionRead]


class ExtensionImport(BaseModel):
    """The outcome of an extensions CSV import (all rows applied, or none)."""

    extensions: list[ExtensionRead]


class FinalRunBrief(BaseModel):
    """The latest final ranking run (its seed is never shown here)."""

    id: int
    created_at: dt.datetime
    finished: bool
    graded: int = Field(0, description="its gradings with a verdict")
    total: int = Field(0, description="its gradings (one per student)")


class AssignmentRead(BaseModel):
    name: str
    title: str
    function: str
    module_file: str
    opens_at: dt.datetime | None = Field(description="UTC; null: open")
    due_at: dt.datetime | None = Field(description="UTC; null: no due date")
    late_policy: Literal["refuse", "mark_late", "penalty"]
    late_curve: LateCurveRead | None = None
    is_open: bool = Field(description="uploads accepted now (late ones included)")
    is_past_due: bool
    max_submissions: int | None
    rate_limit_submissions: int
    rate_limit_window_s: float
    leaderboard_visible: bool
    points: Points
    final_run: FinalRunBrief | None
    you: Quota | None = Field(None, description="students only")
    updated_at: dt.datetime | None = None
    updated_by: str | None = Field(None, description="staff only")


class AssignmentList(BaseModel):
    assignments: list[AssignmentRead]


# ---------------------------------------------------------------------- submissions


class SubmissionCreated(BaseModel):
    id: int
    status: str = Field(examples=["queued"])
    assignment: str
    late: bool = Field(description="uploaded after your due date in force and the slip days "
                       "spent on it (never ranked; graded 0 or under the late curve; derived "
                       "again if the date, your extension or your slip days change)")
    due_at: dt.datetime | None = Field(description="your due date in force (UTC)")
    submissions_used: int
    max_submissions: int | None
    late_text: str | None = Field(None, description="how late, to the second "
                                  "(\"12 s late\"); null: on time")
    slip_days_spent: int = Field(0, description="slip days now spent on this assignment")
    slip_days_left: int = Field(0, description="slip days left for the term")


class CheckVerdictRead(BaseModel):
    name: str
    passed: bool
    skipped: bool
    message: str | None
    numbers: dict[str, Any] | None = Field(description="max_abs_err, tolerance, ...")


class GradingError(BaseModel):
    kind: str = Field(description="`infrastructure` (our fault, retried) or the grader's kind: "
                      "syntax, import, missing_function, timeout, crash, ...")
    message: str | None


class CapturedLog(BaseModel):
    text: str | None
    truncated: bool


class CheckCreditRead(BaseModel):
    """One check's points and what this grading earned from it."""

    name: str
    points: float
    earned: float
    state: Literal["passed", "failed", "not_run"] = Field(
        description="not_run: skipped or never reached (the run ended early): earns nothing")


class ScoreRead(BaseModel):
    """A grade (docs/course.md, "Points"): `total` is what counts; `earned_total` is what
    the grading earned before the late policy, a late penalty or a disqualification."""

    correctness_points: float = Field(description="counted correctness points")
    speed_points: float = Field(description="counted speed points")
    total: float = Field(description="the grade")
    max_total: float
    earned_total: float = Field(description="the grading's points before the late policy or "
                                "a disqualification (equal to `total` when neither applies)")
    withheld: Literal["late", "disqualified"] | None = Field(
        None, description="why `total` is 0 although the grading earned points")
    text: str = Field(description="the grade as every page and command writes it, e.g. "
                      "`60 of 100`, `54 of 100 (60 before a 10% late penalty, 1 day late)`, "
                      "`0 of 100 (60 before the late policy)`, `0 of 100 (disqualified; 60 before)`")
    late_penalty_percent: float = Field(0, description="the late curve's penalty applied")
    late_by_s: float | None = Field(None, description="seconds after the due date in force "
                                    "(before slip days); null: on time")
    late_text: str | None = Field(None, description="`late_by_s` to the second, e.g. "
                                  "`1 day 2 h late`")
    slip_days: int = Field(0, description="slip days spent on this submission")
    checks: list[CheckCreditRead] = Field(default_factory=list,
                                          description="points per check (per-check points)")


class Disqualification(BaseModel):
    reason: str
    at: dt.datetime
    by: str | None = Field(None, description="staff only")


class SubmissionSummary(BaseModel):
    id: int
    student_id: int
    assignment: str
    status: str
    headline_speedup: float | None
    created_at: dt.datetime
    finished_at: dt.datetime | None
    late: bool = Field(False, description="uploaded after the owner's due date in force and "
                       "the slip days spent on it, derived from today's dates and extensions")
    disqualified: bool = False
    score: ScoreRead | None = Field(None, description="null until graded")


class GradingProgress(BaseModel):
    """Where an unfinished grading stands (``grader submit`` and the live page show it).

    Attributes:
        phase: ``queued`` (waiting for a worker) or ``running`` (a worker runs the grader:
            the checks, then on a GPU the benchmark).
        queue_position: while queued, its place in the claim order (1: next), else None.
        elapsed_s: while running, seconds since the worker claimed it.
        limit_s: while running, the worker's wall-clock limit for one grading, seconds.
        stage: while running, the stage the grader reported last (grader/stages.py:
            ``preparing``, ``compiling``, ``checks``, ``benchmark``), or None before its first.
        stage_label: that stage in words (``compiling your kernels``).
        stage_elapsed_s: seconds since the grading entered that stage.
    """

    phase: Literal["queued", "running"]
    queue_position: int | None = None
    elapsed_s: float | None = None
    limit_s: float | None = None
    stage: GradingStage | None = None
    stage_label: str | None = None
    stage_elapsed_s: float | None = None


class SubmissionRead(SubmissionSummary):
    """A submission as its owner sees it: its current grading (the one that counts). Staff
    also get the fields marked staff-only (null for students)."""

    student_name: str
    filename: str | None
    source_sha256: str
    source_bytes: int
    due_at: dt.datetime | None = Field(None, description="the owner's due date in force "
                                       "(their extension's, else the class-wide one)")
    disqualification: Disqualification | None = None
    grading_id: int | None = None
    grader_version: str | None = None
    checks: list[CheckVerdictRead]
    error: GradingError | None
    benchmark: dict[str, Any] | None
    device: str | None
    versions: dict[str, Any] | None
    log: CapturedLog | None
    started_at: dt.datetime | None
    grading_duration_s: float | None
    worker_id: str | None
    attempts: int
    progress: GradingProgress | None = Field(
        None, description="while queued or running: queue position, or time elapsed and the limit")
    result: dict[str, Any] | None = Field(
        None, description="the grader's result document; for students without its `seed`")
    # Staff-only.
    seed: int | None = None
    grader_exit_code: int | None = None
    grader_stderr: str | None = None
    last_attempt_error: str | None = None

    def result_document(self) -> dict[str, Any] | None:
        """The result document to render (the pages' report, `grader submit`'s table): the
        stored one when the grader produced it, else one built from this answer's fields (a
        grading that broke on our side); None while there is no verdict."""
        if self.status not in TERMINAL:
            return None
        if self.result is not None:
            return self.result
        return {
            "assignment": self.assignment,
            "device": self.device or "",
            "verdict": self.status,
            "error": None if self.error is None else {
                "kind": self.error.kind, "message": self.error.message or ""},
            "checks": [{**(c.numbers or {}), "name": c.name, "passed": c.passed,
                        "skipped": c.skipped, "message": c.message or ""} for c in self.checks],
            "duration_s": self.grading_duration_s or 0.0,
        }


class SubmissionList(BaseModel):
    submissions: list[SubmissionSummary]


class GradingRead(BaseModel):
    """One grading of a submission: its upload's, a regrade, or a final ranking run's."""

    id: int
    submission_id: int
    purpose: Literal["submission", "regrade", "final"]
    is_current: bool = Field(description="the grading that counts for the submission")
    status: Status
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    attempts: int
    grader_version: str | None
    device: str | None
    headline_speedup: float | None
    error: GradingError | None
    checks: list[CheckVerdictRead]
    score: ScoreRead | None
    regrade_batch_id: int | None
    final_run_id: int | None
    replaces_grading_id: int | None
    # Staff-only.
    seed: int | None = None
    requested_by: str | None = None
    worker_id: str | None = None


class GradingList(BaseModel):
    gradings: list[GradingRead]


class DisqualifyRequest(BaseModel):
    reason: StoredText = Field(min_length=1, max_length=2000, description="shown to the student")


class RestoreRequest(BaseModel):
    reason: StoredText | None = Field(None, max_length=2000,
                                      description="recorded in the audit log")


# ---------------------------------------------------------------------- leaderboard


class LeaderboardRow(BaseModel):
    """One student's ranked submission. For a student viewer, other rows are anonymous
    (`student_id`, `student_name`, `submission_id`, `submitted_at` and `score` are null)."""

    rank: int | None = Field(description="null: not ranked (see `reason`)")
    is_you: bool
    student_id: int | None
    student_name: str | None
    submission_id: int | None
    headline_speedup: float | None = Field(
        description="geomean speedup vs the baseline (higher is better); the final run's "
                    "once there is one; null: no GPU benchmark"
    )
    device: str | None
    submitted_at: dt.datetime | None
    reason: str | None = None
    score: ScoreRead | None = None
    graded_submission_id: int | None = Field(
        None, description="the submission the score comes from (best or latest)")


class FinalRunProgress(BaseModel):
    """A final ranking run still grading: it decides the board once `graded` == `total`."""

    id: int
    graded: int = Field(description="gradings of the run with a verdict")
    total: int = Field(description="gradings in the run (one per student)")


class Leaderboard(BaseModel):
    assignment: str
    phase: Literal["provisional", "final"] = Field(
        description="final once a final ranking run has finished (its numbers rank); a run "
                    "still grading leaves the board as it was and is in final_run_running")
    final_run_id: int | None = Field(None, description="the finished run that ranks")
    final_run_running: FinalRunProgress | None = None
    rows: list[LeaderboardRow]


# ------------------------------------------------------------------------- regrades


class RegradeCreate(BaseModel):
    """Which submissions to re-run: the assignment's submissions whose current grading
    finished, narrowed by any of the optional filters."""

    model_config = ConfigDict(extra="forbid")

    assignment: StoredText = Field(max_length=100,
                                   json_schema_extra={"enum": sorted(MANIFESTS)})
    student_id: int | None = Field(None, ge=1, le=MAX_DB_INT)
    status: Verdict | None = Field(None, description="current verdict")
    grader_version: StoredText | None = Field(None, max_length=100,
                                       description="current grading's versions.grader")
    submission_ids: list[Annotated[int, Field(ge=1, le=MAX_DB_INT)]] | None = Field(
        None, max_length=2000)


class GradingBrief(BaseModel):
    id: int
    status: Status
    error_kind: str | None
    error_message: str | None
    headline_speedup: float | None
    grader_version: str | None
    checks_passed: int
    checks_failed: int
    checks_not_run: int
    score: ScoreRead | None
    finished_at: dt.datetime | None


class RegradeRow(BaseModel):
    submission_id: int
    student_id: int
    student_name: str
    disqualified: bool
    before: GradingBrief | None
    after: GradingBrief
    verdict_changed: bool
    score_delta: float | None
    applicable: bool = Field(description="finished with a verdict (not an infrastructure error)")
    applied: bool


class RegradeSummary(BaseModel):
    id: int
    assignment: str
    state: Literal["open", "applied", "discarded"]
    selection: dict[str, Any]
    created_at: dt.datetime
    created_by: str
    decided_at: dt.datetime | None
    decided_by: str | None


class RegradeRead(RegradeSummary):
    """A batch with its side-by-side comparison (old grading vs new)."""

    total: int
    pending: int
    changed: int
    left_out_busy: int | None = Field(None, description="on creation: matching submissions "
                                      "left out because another open batch regrades them")
    unchanged: list[int] | None = Field(None, description="on apply: submissions that kept "
                                        "their grading")
    rows: list[RegradeRow]


class RegradeList(BaseModel):
    regrades: list[RegradeSummary]


# ------------------------------------------------------------------------ final runs


class FinalRunRow(BaseModel):
    student_id: int
    student_name: str
    submission_id: int
    grading_id: int
    status: Status
    headline_speedup: float | None
    reason: str | None
    disqualified: bool


class FinalRunRead(BaseModel):
    """A final ranking run (staff only: it carries the secret seed)."""

    id: int
    assignment: str
    created_at: dt.datetime
    created_by: str
    seed: int
    students: int
    pending: int
    rows: list[FinalRunRow]


# ---------------------------------------------------------------------------- audit


class AuditEventRead(BaseModel):
    id: int
    created_at: dt.datetime
    actor_kind: str
    actor_name: str
    actor_staff_id: int | None
    action: str
    target_type: str | None
    target_id: str | None
    assignment: str | None
    details: dict[str, Any] | None


class AuditLog(BaseModel):
    events: list[AuditEventRead]


# --------------------------------------------------------------------------- health


class WorkerHealth(BaseModel):
    worker_id: str
    hostname: str
    last_seen_at: dt.datetime
    alive: bool
    current_submission_id: int | None
    gpu: str | None = Field(None, description="the worker's GPU (model, nvidia-smi index, UUID)")
    cpus: str | None = Field(None, description="the host cores it is bound to (a CPU list)")
    launcher: str | None = Field(None, description="what started it: `slurm job N`, `kubernetes pod P`")


class FleetHealth(BaseModel):
    """The last tick of one fleet controller (`grader fleet slurm`)."""

    name: str
    scheduler: str
    max_jobs: int
    pending_jobs: int
    running_jobs: int
    queue_depth: int = Field(description="queued gradings when the controller last looked")
    submitted_total: int
    last_error: str | None
    last_tick_at: dt.datetime


class Health(BaseModel):
    status: str = Field(description="`ok`, `degraded` (no live worker) or `unavailable`")
    database: str
    queue_depth: int | None
    workers: list[WorkerHealth]
    fleets: list[FleetHealth] = Field(default_factory=list)


# ------------------------------------------------------------------ similarity review


class SimilarityRunCreate(BaseModel):
    threshold: float | None = Field(
        None, gt=0, le=1, description="pairs at or above it are listed (the larger side's share "
        "of matched code, 0..1]; default 0.6")


class SimilarityRunRead(BaseModel):
    """A similarity review of an assignment (a worker runs it; never a request)."""

    id: int
    assignment: str
    status: str = Field(description="`queued`, `running`, `finished` or `error`")
    threshold: float
    requested_by: str
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    error_message: str | None
    tool: str | None = Field(description="the tool and its version, e.g. `copydetect 0.5.0`")
    parameters: dict[str, Any] | None
    submissions_compared: int | None = Field(
        description="one per student: the counted submission (the one their grade comes from), "
        "else the latest upload (`parameters.latest_upload_ids`)")
    sources_compared: int | None = Field(description="known sources: reference, public kernels")
    pairs_compared: int | None
    duration_s: float | None


class SimilaritySide(BaseModel):
    """One side of a pair: a student's submission, or a known source."""

    kind: Literal["submission", "source"]
    submission_id: int | None = None
    student_id: int | None = None
    student_name: str | None = None
    source_id: int | None = None
    source_name: str | None = None
    compared_as: Literal["counted", "latest_upload"] | None = Field(
        None, description="a submission side: `counted` (the submission the student's grade "
        "came from when the review ran) or `latest_upload` (nothing counted yet: no upload "
        "graded yet under counting `best`; or a review from before counted submissions were "
        "compared); null for a source")
    similarity: float = Field(description="this side's share of matched code, 0..1")
    fragments: list[tuple[int, int]] = Field(
        description="matched [start, end) character offsets into `text`, sorted")
    text: str | None = Field(None, description="the whole text (in a single pair's answer)")


class SimilarityPairRead(BaseModel):
    id: int
    run_id: int
    similarity: float = Field(description="the larger of the two sides' shares")
    matched_chars: int
    left: SimilaritySide
    right: SimilaritySide
    reviewed_at: dt.datetime | None
    reviewed_by: str | None
    review_note: str | None


class SimilarityOverview(BaseModel):
    """The latest finished review's pairs at or above `min_similarity`, most similar first,
    and the review queued, running or failed since, if any."""

    assignment: str
    run: SimilarityRunRead | None
    pending: SimilarityRunRead | None
    min_similarity: float
    total: int = Field(description="pairs at or above `min_similarity` (`pairs` is one page)")
    pairs: list[SimilarityPairRead]


class SimilarityReview(BaseModel):
    reviewed: bool = Field(True, description="false clears the mark")
    note: StoredText | None = Field(None, max_length=2000)


class SimilaritySourceCreate(BaseModel):
    name: StoredText = Field(min_length=1, max_length=200)
    origin: StoredText | None = Field(None, max_length=2000,
                                      description="where it comes from (a URL); never fetched")
    text: StoredText = Field(min_length=1, max_length=256 * 1024, description="Python source")


class SimilaritySourceRead(BaseModel):
    id: int
    assignment: str
    kind: str = Field(description="`reference` (the grader's), `public` (staff added) or "
                      "`retired` (a reference since replaced; kept for earlier reviews' pairs)")
    name: str
    origin: str | None
    source_sha256: str
    bytes: int
    added_by: str
    added_at: dt.datetime


class SimilaritySourceList(BaseModel):
    sources: list[SimilaritySourceRead]
