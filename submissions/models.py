"""ORM models (SQLAlchemy 2.0). The schema itself is created only by the Alembic migrations;
tests check that these models and the migrations agree.

Tables:
- ``students``: a name (unique, compared through ``name_key``), optional roster e-mail and
  id (unique), and the sha256 of the student's bearer token (never the token).
- ``staff_members``: instructors and TAs, each with a personal token (stored hashed).
- ``assignments``: per-assignment settings set by staff (dates, late policy, limits, points);
  one row per entry of grader/manifest.py, created the first time the service touches it.
- ``submissions``: one uploaded file (source, hash, seed, disqualification). Lateness is not
  stored: it is derived from the upload time and the due date in force (submissions/lateness.py).
- ``extensions``: a student's own due date for one assignment (a new date or extra days).
- ``slip_day_spends``: the slip days a student spent on one assignment's submission that
  counts (at most one row per student and assignment; re-derived, never added to).
- ``gradings``: every run of the grader on a submission, and the job queue (see
  submissions/repository/queue.py for the claim/lease protocol). A submission's *current*
  grading (``is_current``; at most one) is the one that counts; regrades and final ranking
  runs add gradings beside it, so the history is never overwritten.
- ``check_verdicts``: one row per correctness check of a finished grading.
- ``regrade_batches``: a staff-chosen set of submissions re-run together, previewed, then
  applied (their new gradings become current) or discarded.
- ``final_runs``: a final ranking run of an assignment on a fresh secret seed.
- ``audit_events``: who did what, when: every staff action.
- ``worker_heartbeats``: one row per worker process, for /healthz.
- ``leases``: named leases that one process at a time holds, across processes and hosts
  (submissions/repository/leases.py); the scheduled LMS sync's (submissions/lti/sync.py).
- ``similarity_sources``, ``similarity_runs``, ``similarity_pairs``: similarity review
  (submissions/similarity.py): known public kernels, review jobs and the pairs they found.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    and_,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utc_now() -> dt.datetime:
    """The current time as an aware UTC datetime (all stored times are UTC)."""
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timestamp stored in UTC and always returned timezone-aware.

    PostgreSQL stores ``timestamptz``; SQLite stores naive UTC text, which sorts and compares
    correctly as long as every value is written through this type.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime; pass an aware UTC datetime")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


class SubmissionStatus(enum.StrEnum):
    """Lifecycle of a grading (and so of a submission, whose status is its current
    grading's). ``queued -> running -> passed|failed|error``; a running job whose lease
    expires, or whose grading broke for infrastructure reasons, goes back to ``queued`` until
    ``max_attempts`` is reached."""

    QUEUED = "queued"
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"


TERMINAL_STATUSES = (SubmissionStatus.PASSED, SubmissionStatus.FAILED, SubmissionStatus.ERROR)

#: error_kind of a grading that broke because of us (grader, machine, database), not the student.
INFRASTRUCTURE_ERROR = "infrastructure"


class GradingPurpose(enum.StrEnum):
    """Why a grading ran.

    - ``submission``: the grading of an upload; current from the start.
    - ``regrade``: a staff re-run (same seed as the submission); current once its regrade
      batch is applied.
    - ``final``: the final ranking run on a secret seed; never current, it decides the rank.
    """

    SUBMISSION = "submission"
    REGRADE = "regrade"
    FINAL = "final"


class StaffRole(enum.StrEnum):
    """``instructor``: everything. ``ta``: read everything, regrade, disqualify and restore;
    no settings, no tokens."""

    INSTRUCTOR = "instructor"
    TA = "ta"


class LatePolicy(enum.StrEnum):
    """What an upload after the due date (and the slip days it may spend) gets: refused,
    accepted and marked late (a late submission is never ranked and earns no points in the
    LMS score), or accepted with the assignment's late curve's penalty
    (submissions/lateness.py)."""

    REFUSE = "refuse"
    MARK_LATE = "mark_late"
    PENALTY = "penalty"


class Counting(enum.StrEnum):
    """Which of a student's submissions gives their grade: the one with the best grade,
    or the latest upload."""

    BEST = "best"
    LATEST = "latest"


class RegradeState(enum.StrEnum):
    """``open`` (gradings queued or finished, nothing changed yet) -> ``applied`` (the new
    gradings became current) or ``discarded`` (they stay in the history only)."""

    OPEN = "open"
    APPLIED = "applied"
    DISCARDED = "discarded"


class Base(DeclarativeBase):
    """Declarative base with the project's constraint naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Student(Base):
    """A student who may upload submissions, identified by a bearer token."""

    __tablename__ = "students"
    __table_args__ = (
        Index("uq_students_name_key", "name_key", unique=True),
        Index("uq_students_email", "email", unique=True),
        Index("uq_students_external_id", "external_id", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    # service.student_name_key(name): trimmed and case-folded; unique (uq_students_name_key),
    # so no two students share a name up to case and surrounding whitespace. Case folding
    # may lengthen a string (at most 3x: "ß" -> "ss"), hence the wider column. Computed in
    # Python, not SQL, so SQLite and PostgreSQL compare alike (their lower() functions differ).
    name_key: Mapped[str] = mapped_column(String(600))
    # From the roster (both optional, unique when present): the e-mail, stored lower-case,
    # and the institution's student id; the LMS export carries them.
    email: Mapped[str | None] = mapped_column(String(320))
    external_id: Mapped[str | None] = mapped_column(String(100))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)
    token_rotated_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    # The student's slip-day budget for the term (set by staff, audited; spent in
    # slip_day_spends).
    slip_days: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))

    submissions: Mapped[list[Submission]] = relationship(back_populates="student")


class StaffMember(Base):
    """An instructor or a TA with a personal bearer token. (The bootstrap instructor of
    ``GRADER_INSTRUCTOR_TOKEN`` has no row.)"""

    __tablename__ = "staff_members"
    __table_args__ = (
        CheckConstraint("role IN ('instructor', 'ta')", name="role"),
        Index("uq_staff_members_name_key", "name_key", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    name_key: Mapped[str] = mapped_column(String(600))  # as students.name_key
    role: Mapped[str] = mapped_column(String(16))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)
    token_rotated_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())


def _no_thresholds() -> list[dict[str, float]]:
    return []


class Assignment(Base):
    """Settings of one assignment of the manifest, set by an instructor. Every column has a
    default, so a row created on first use behaves like an assignment without deadlines,
    limits (beyond the service's rate limit) or speed points."""

    __tablename__ = "assignments"
    __table_args__ = (
        CheckConstraint("late_policy IN ('refuse', 'mark_late', 'penalty')", name="late_policy"),
        CheckConstraint("counting IN ('best', 'latest')", name="counting"),
        CheckConstraint("late_unit IS NULL OR late_unit IN ('hour', 'day')", name="late_unit"),
        CheckConstraint("late_after_cap IN ('zero', 'refuse')", name="late_after_cap"),
        CheckConstraint("late_percent IS NULL OR (late_percent >= 0 AND late_percent <= 100)",
                        name="late_percent"),
        CheckConstraint("late_cap IS NULL OR late_cap > 0", name="late_cap"),
        CheckConstraint("max_submissions IS NULL OR max_submissions > 0", name="max_submissions"),
        CheckConstraint("rate_limit_submissions IS NULL OR rate_limit_submissions > 0",
                        name="rate_limit_submissions"),
        CheckConstraint("rate_limit_window_s IS NULL OR rate_limit_window_s > 0",
                        name="rate_limit_window_s"),
        CheckConstraint("correctness_points >= 0", name="correctness_points"),
    )

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    opens_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    due_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    late_policy: Mapped[str] = mapped_column(String(16), default=LatePolicy.MARK_LATE)
    max_submissions: Mapped[int | None] = mapped_column(Integer)
    # None: the service-wide GRADER_RATE_LIMIT_SUBMISSIONS / GRADER_RATE_LIMIT_WINDOW_S.
    rate_limit_submissions: Mapped[int | None] = mapped_column(Integer)
    rate_limit_window_s: Mapped[float | None] = mapped_column(Float)
    leaderboard_visible: Mapped[bool] = mapped_column(Boolean, default=True)
    correctness_points: Mapped[float] = mapped_column(Float, default=100.0)
    # [{"min_speedup": 1.0, "points": 10.0}, ...]: ascending thresholds (submissions/scoring.py).
    speed_points: Mapped[list[dict[str, float]]] = mapped_column(JSON, default=_no_thresholds)
    # {"check name": points, ...}: staff's points per check; None: the assignment folder's
    # points.toml (submissions/check_points.py). Scaled to correctness_points.
    check_points: Mapped[dict[str, float] | None] = mapped_column(JSON)
    counting: Mapped[str] = mapped_column(String(8), default=Counting.BEST,
                                          server_default=text("'best'"))
    # The late curve of late_policy 'penalty' (submissions/lateness.py): late_percent off per
    # late_unit started; past late_cap units (None: no cap) late_after_cap.
    late_percent: Mapped[float | None] = mapped_column(Float)
    late_unit: Mapped[str | None] = mapped_column(String(8))
    late_cap: Mapped[float | None] = mapped_column(Float)
    late_after_cap: Mapped[str] = mapped_column(String(8), default="zero",
                                                server_default=text("'zero'"))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)
    updated_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    updated_by: Mapped[str | None] = mapped_column(String(200))


class Submission(Base):
    """One uploaded file. Its gradings (the queue jobs and their results) are in
    ``gradings``; ``current_grading`` is the one that counts."""

    __tablename__ = "submissions"
    __table_args__ = (
        Index("ix_submissions_student_id_created_at", "student_id", "created_at"),
        Index("ix_submissions_assignment_student_id", "assignment", "student_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    student_id: Mapped[int] = mapped_column(ForeignKey("students.id", ondelete="CASCADE"))
    assignment: Mapped[str] = mapped_column(String(100))
    # The client's file name, for display only; never used as a path.
    original_filename: Mapped[str | None] = mapped_column(String(255))
    source_text: Mapped[str] = mapped_column(Text)
    source_sha256: Mapped[str] = mapped_column(String(64))
    source_bytes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)
    # The grading seed of this submission (its upload's grading and every regrade use it);
    # derived from the deployment secret, never shown to the student.
    seed: Mapped[int | None] = mapped_column(BigInteger)
    # Disqualified by staff (hidden from rankings and scores; the student sees the reason).
    disqualified_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    disqualified_by: Mapped[str | None] = mapped_column(String(200))
    disqualified_reason: Mapped[str | None] = mapped_column(Text)

    student: Mapped[Student] = relationship(back_populates="submissions")
    gradings: Mapped[list[Grading]] = relationship(
        back_populates="submission",
        order_by="Grading.id",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )
    current_grading: Mapped[Grading | None] = relationship(
        primaryjoin=lambda: and_(Grading.submission_id == Submission.id, Grading.is_current),
        viewonly=True,
        uselist=False,
    )


class Grading(Base):
    """One run of the grader on a submission: a job in the queue, then its stored result."""

    __tablename__ = "gradings"
    __table_args__ = (
        CheckConstraint(
            "status IN ('queued', 'running', 'passed', 'failed', 'error')", name="status"
        ),
        CheckConstraint("purpose IN ('submission', 'regrade', 'final')", name="purpose"),
        Index("ix_gradings_status_priority_created_at", "status", "priority", "created_at", "id"),
        # At most one current grading per submission.
        Index("uq_gradings_current_submission_id", "submission_id", unique=True,
              sqlite_where=text("is_current"), postgresql_where=text("is_current")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), index=True
    )
    purpose: Mapped[str] = mapped_column(String(16), default=GradingPurpose.SUBMISSION)
    is_current: Mapped[bool] = mapped_column(Boolean, default=False)
    # Claim order: lower first (0: students' uploads; 1: staff regrades and final runs),
    # then oldest first.
    priority: Mapped[int] = mapped_column(Integer, default=0)
    seed: Mapped[int | None] = mapped_column(BigInteger)
    regrade_batch_id: Mapped[int | None] = mapped_column(
        ForeignKey("regrade_batches.id", ondelete="SET NULL"), index=True
    )
    final_run_id: Mapped[int | None] = mapped_column(
        ForeignKey("final_runs.id", ondelete="SET NULL"), index=True
    )
    # A regrade: the grading that was current when it was queued (what it is compared with
    # and what applying it replaces).
    replaces_grading_id: Mapped[int | None] = mapped_column(
        ForeignKey("gradings.id", ondelete="SET NULL")
    )
    requested_by: Mapped[str | None] = mapped_column(String(200))

    status: Mapped[str] = mapped_column(String(16), default=SubmissionStatus.QUEUED)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)

    # Queue state. attempts counts claims; lease_token identifies the current claim.
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker_id: Mapped[str | None] = mapped_column(String(200))
    lease_token: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    # While running: the stage the grader reported last (grader/stages.py) and when it began.
    stage: Mapped[str | None] = mapped_column(String(16))
    stage_started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    last_attempt_error: Mapped[str | None] = mapped_column(Text)

    # Result (written in one transaction with the check_verdicts rows).
    error_kind: Mapped[str | None] = mapped_column(String(50))
    error_message: Mapped[str | None] = mapped_column(Text)
    headline_speedup: Mapped[float | None] = mapped_column(Float)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    benchmark: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    versions: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # versions["grader"], kept apart so that regrades can select by it.
    grader_version: Mapped[str | None] = mapped_column(String(100))
    device: Mapped[str | None] = mapped_column(String(200))
    grader_exit_code: Mapped[int | None] = mapped_column(Integer)
    grading_duration_s: Mapped[float | None] = mapped_column(Float)
    log_text: Mapped[str | None] = mapped_column(Text)
    log_truncated: Mapped[bool | None] = mapped_column(Boolean)
    grader_stderr: Mapped[str | None] = mapped_column(Text)

    submission: Mapped[Submission] = relationship(back_populates="gradings")
    replaces: Mapped[Grading | None] = relationship(remote_side=[id], viewonly=True)
    checks: Mapped[list[CheckVerdict]] = relationship(
        back_populates="grading",
        order_by="CheckVerdict.position",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )


class CheckVerdict(Base):
    """The verdict of one named correctness check of one grading."""

    __tablename__ = "check_verdicts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    grading_id: Mapped[int] = mapped_column(
        ForeignKey("gradings.id", ondelete="CASCADE"), index=True
    )
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(200))
    passed: Mapped[bool] = mapped_column(Boolean)
    skipped: Mapped[bool] = mapped_column(Boolean)
    message: Mapped[str | None] = mapped_column(Text)
    # Every other key of the check's entry in the result document (max_abs_err, tolerance...).
    numbers: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    grading: Mapped[Grading] = relationship(back_populates="checks")


class RegradeBatch(Base):
    """Submissions re-run together by staff; previewed, then applied or discarded."""

    __tablename__ = "regrade_batches"
    __table_args__ = (
        CheckConstraint("state IN ('open', 'applied', 'discarded')", name="state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    assignment: Mapped[str] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(16), default=RegradeState.OPEN)
    # The filters staff chose (assignment, student_id, status, grader_version, ids).
    selection: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)
    created_by: Mapped[str] = mapped_column(String(200))
    decided_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    decided_by: Mapped[str | None] = mapped_column(String(200))

    gradings: Mapped[list[Grading]] = relationship(order_by="Grading.id", viewonly=True)


class FinalRun(Base):
    """A final ranking run: each student's best passing on-time submission re-graded on one
    fresh secret seed after the due date. The latest run of an assignment decides its ranks."""

    __tablename__ = "final_runs"
    __table_args__ = (Index("ix_final_runs_assignment_id", "assignment", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    assignment: Mapped[str] = mapped_column(String(100))
    # Secret: shown to staff, never in any answer a student can read.
    seed: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)
    created_by: Mapped[str] = mapped_column(String(200))

    gradings: Mapped[list[Grading]] = relationship(order_by="Grading.id", viewonly=True)


class AuditEvent(Base):
    """One staff action: who (``actor_*``), when (``created_at``), what (``action`` on
    ``target_type``/``target_id``, with ``details``)."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now, index=True)
    # instructor | ta (a staff row) | bootstrap (GRADER_INSTRUCTOR_TOKEN) | cli (local
    # database access: `grader students ...`, `grader staff ...`) | student (own token)
    actor_kind: Mapped[str] = mapped_column(String(16))
    actor_staff_id: Mapped[int | None] = mapped_column(
        ForeignKey("staff_members.id", ondelete="SET NULL")
    )
    actor_name: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(64), index=True)
    target_type: Mapped[str | None] = mapped_column(String(32))
    target_id: Mapped[str | None] = mapped_column(String(100))
    assignment: Mapped[str | None] = mapped_column(String(100))
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Extension(Base):
    """A student's extension of one assignment's due date (an accommodation): a new due date
    or extra days past the class-wide one (exactly one of them), with the reason and who
    granted it. At most one per student and assignment; revoking deletes it (both audited).
    How it moves the due date: submissions/lateness.py."""

    __tablename__ = "extensions"
    __table_args__ = (
        Index("uq_extensions_assignment_student_id", "assignment", "student_id", unique=True),
        CheckConstraint("(due_at IS NULL) <> (extra_days IS NULL)", name="one_term"),
        CheckConstraint("extra_days IS NULL OR extra_days > 0", name="extra_days"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    assignment: Mapped[str] = mapped_column(String(100))
    student_id: Mapped[int] = mapped_column(ForeignKey("students.id", ondelete="CASCADE"))
    due_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    extra_days: Mapped[float | None] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text)
    granted_by: Mapped[str] = mapped_column(String(200))
    granted_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)

    student: Mapped[Student] = relationship()


class SlipDaySpend(Base):
    """Slip days a student spent on one assignment: on its submission that counts, as many
    whole days as cover its lateness, up to the budget left. Derived by
    submissions/slip_days.py under the student's row lock and rewritten (never added to),
    so concurrent uploads and repeated derivations spend them once; at most one row per
    student and assignment (a unique index)."""

    __tablename__ = "slip_day_spends"
    __table_args__ = (
        Index("uq_slip_day_spends_student_id_assignment", "student_id", "assignment",
              unique=True),
        CheckConstraint("days > 0", name="days"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    student_id: Mapped[int] = mapped_column(ForeignKey("students.id", ondelete="CASCADE"))
    assignment: Mapped[str] = mapped_column(String(100))
    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), index=True)
    days: Mapped[int] = mapped_column(Integer)
    spent_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)


class WorkerHeartbeat(Base):
    """Liveness of one worker process, refreshed by its heartbeat thread."""

    __tablename__ = "worker_heartbeats"

    worker_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    last_seen_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    current_submission_id: Mapped[int | None] = mapped_column(Integer)
    #: The worker's GPU (model, nvidia-smi index, UUID), its host cores (a CPU list) and what
    #: started it (``slurm job 123``, ``kubernetes pod ...``); None where not known.
    gpu: Mapped[str | None] = mapped_column(String(300))
    cpus: Mapped[str | None] = mapped_column(String(1000))
    launcher: Mapped[str | None] = mapped_column(String(200))


class FleetController(Base):
    """The last state a fleet controller (`grader fleet slurm`) saw and acted on: the jobs it
    had pending and running on its scheduler, the queue depth it read, how many jobs it has
    submitted, and its last error. One row per controller name, rewritten on every tick."""

    __tablename__ = "fleet_controllers"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    scheduler: Mapped[str] = mapped_column(String(20))
    max_jobs: Mapped[int] = mapped_column(Integer)
    pending_jobs: Mapped[int] = mapped_column(Integer)
    running_jobs: Mapped[int] = mapped_column(Integer)
    queue_depth: Mapped[int] = mapped_column(Integer)
    submitted_total: Mapped[int] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_tick_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class Lease(Base):
    """A named lease: the process that holds it (``holder``, unique per process) until
    ``expires_at``. Taken, renewed and released only by the conditional writes of
    submissions/repository/leases.py, so at most one unexpired holder exists per name."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    acquired_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class IdempotencyKey(Base):
    """The first successful answer to a POST sent with an ``Idempotency-Key`` header
    (submissions/idempotency.py): a retry of the same request by the same caller gets this
    answer again instead of creating a second row. Written in the transaction that created
    the row the answer describes, so either both exist or neither does.

    The key itself is not stored, only ``key_sha256`` (a lookup hash), and the answer is
    sealed with a key derived from it (it may hold a new student's token, which the service
    otherwise stores only hashed). Rows expire after ``idempotency_ttl_s`` (24 h)."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index("uq_idempotency_keys_scope_key", "scope", "key_sha256", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # Whose key: "student:<id>", "staff:<id>" or "instructor" (the bootstrap token).
    scope: Mapped[str] = mapped_column(String(64))
    key_sha256: Mapped[str] = mapped_column(String(64))
    # sha256 of the method, the route and the request's content (its fingerprint).
    request_sha256: Mapped[str] = mapped_column(String(64))
    # Null only inside the creating transaction, until the answer is known.
    status_code: Mapped[int | None] = mapped_column(Integer)
    response_body: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now, index=True)


# ------------------------------------------------------------------ LTI 1.3 (docs/lms.md)


class LtiScoreState(enum.StrEnum):
    """A student's score sync to one LMS line item: ``pending`` (a grade exists or changed
    and is not sent yet), ``synced`` (the platform has this grade), ``failed`` (the last push
    failed: ``last_error``; retried at ``next_attempt_at``), ``no_identity`` (a grade exists
    but the platform never listed or launched this student: nothing to send it to)."""

    PENDING = "pending"
    SYNCED = "synced"
    FAILED = "failed"
    NO_IDENTITY = "no_identity"


def _empty_list() -> list[Any]:
    return []


class LtiRegistration(Base):
    """One LMS (an LTI 1.3 platform) registered by staff: its issuer, the client id it gave
    this tool, the deployment ids it may launch from, and its endpoints."""

    __tablename__ = "lti_registrations"
    __table_args__ = (
        Index("uq_lti_registrations_issuer_client_id", "issuer", "client_id", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    issuer: Mapped[str] = mapped_column(String(500))
    client_id: Mapped[str] = mapped_column(String(255))
    deployment_ids: Mapped[list[str]] = mapped_column(JSON, default=_empty_list)
    auth_login_url: Mapped[str] = mapped_column(String(1000))
    auth_token_url: Mapped[str] = mapped_column(String(1000))
    keyset_url: Mapped[str] = mapped_column(String(1000))
    # The ``aud`` of the tool's client assertion when the platform wants another than its
    # token URL (Moodle, Canvas: None).
    auth_audience: Mapped[str | None] = mapped_column(String(1000))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)
    created_by: Mapped[str] = mapped_column(String(200))


class LtiToolKey(Base):
    """One of the tool's RSA signing keys (its private half PEM-encrypted with a key derived
    from the deployment secret). The newest unretired key signs; retired keys stay in the
    published JWKS for a grace period so that a platform's cached copy keeps verifying."""

    __tablename__ = "lti_tool_keys"

    kid: Mapped[str] = mapped_column(String(64), primary_key=True)
    private_key_pem: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)
    retired_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())


class LtiLoginState(Base):
    """An OIDC login initiation waiting for its launch: the ``state`` and ``nonce`` sent to
    the platform, used at most once, until ``expires_at``."""

    __tablename__ = "lti_login_states"

    state: Mapped[str] = mapped_column(String(64), primary_key=True)
    nonce: Mapped[str] = mapped_column(String(64))
    registration_id: Mapped[int] = mapped_column(
        ForeignKey("lti_registrations.id", ondelete="CASCADE"))
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class LtiUsedNonce(Base):
    """A launch's nonce, kept until its id_token would have expired: a replay is refused."""

    __tablename__ = "lti_used_nonces"

    nonce_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class LtiIdentity(Base):
    """A person as one platform knows them: its stable ``sub``, never a name. Linked to the
    student or staff account the launch or roster sync made for them."""

    __tablename__ = "lti_identities"
    __table_args__ = (
        Index("uq_lti_identities_registration_id_sub", "registration_id", "sub", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    registration_id: Mapped[int] = mapped_column(
        ForeignKey("lti_registrations.id", ondelete="CASCADE"))
    sub: Mapped[str] = mapped_column(String(255))
    student_id: Mapped[int | None] = mapped_column(
        ForeignKey("students.id", ondelete="SET NULL"), index=True)
    staff_id: Mapped[int | None] = mapped_column(ForeignKey("staff_members.id", ondelete="SET NULL"))
    name: Mapped[str | None] = mapped_column(String(200))
    email: Mapped[str | None] = mapped_column(String(320))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)
    last_seen_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)


class LtiContext(Base):
    """A course of a platform (the LTI context): its NRPS and AGS endpoints as the launch
    gave them, and what the last roster sync changed."""

    __tablename__ = "lti_contexts"
    __table_args__ = (
        Index("uq_lti_contexts_registration_id_context_id", "registration_id", "context_id",
              unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    registration_id: Mapped[int] = mapped_column(
        ForeignKey("lti_registrations.id", ondelete="CASCADE"))
    deployment_id: Mapped[str] = mapped_column(String(255))
    context_id: Mapped[str] = mapped_column(String(255))
    title: Mapped[str | None] = mapped_column(String(500))
    memberships_url: Mapped[str | None] = mapped_column(String(1000))
    lineitems_url: Mapped[str | None] = mapped_column(String(1000))
    ags_scopes: Mapped[list[str]] = mapped_column(JSON, default=_empty_list)
    roster_synced_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    # {"added": [names], "rejoined": [...], "dropped": [...], "kept": n}
    roster_changes: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    roster_error: Mapped[str | None] = mapped_column(Text)


class LtiMembership(Base):
    """A person's membership of a context: their role there and whether the roster still
    lists them (``dropped``: a sync no longer found them, or found them inactive)."""

    __tablename__ = "lti_memberships"
    __table_args__ = (
        CheckConstraint("status IN ('active', 'dropped')", name="status"),
        Index("uq_lti_memberships_context_row_id_identity_id", "context_row_id", "identity_id",
              unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    context_row_id: Mapped[int] = mapped_column(ForeignKey("lti_contexts.id", ondelete="CASCADE"))
    identity_id: Mapped[int] = mapped_column(ForeignKey("lti_identities.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="active")
    changed_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)


class LtiResourceLink(Base):
    """A link placed in a context that launches one assignment."""

    __tablename__ = "lti_resource_links"
    __table_args__ = (
        Index("uq_lti_resource_links_context_row_id_resource_link_id", "context_row_id",
              "resource_link_id", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    context_row_id: Mapped[int] = mapped_column(ForeignKey("lti_contexts.id", ondelete="CASCADE"))
    resource_link_id: Mapped[str] = mapped_column(String(255))
    assignment: Mapped[str] = mapped_column(String(100))
    lineitem_url: Mapped[str | None] = mapped_column(String(1000))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)


class LtiLineItem(Base):
    """The one line item of an assignment in a context (found by its ``resourceId`` or
    created once; never twice: the unique index and the find-before-create)."""

    __tablename__ = "lti_line_items"
    __table_args__ = (
        Index("uq_lti_line_items_context_row_id_assignment", "context_row_id", "assignment",
              unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    context_row_id: Mapped[int] = mapped_column(ForeignKey("lti_contexts.id", ondelete="CASCADE"))
    assignment: Mapped[str] = mapped_column(String(100))
    lineitem_url: Mapped[str] = mapped_column(String(1000))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)


class LtiScoreSync(Base):
    """One student's grade of one assignment as sent (or to be sent) to a context's line
    item: its state (LtiScoreState), the score to send, the score the platform has, the
    attempts and the next one (backoff), the last failure's reason."""

    __tablename__ = "lti_score_syncs"
    __table_args__ = (
        CheckConstraint("state IN ('pending', 'synced', 'failed', 'no_identity')", name="state"),
        Index("uq_lti_score_syncs_context_row_id_assignment", "context_row_id", "assignment",
              "student_id", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    context_row_id: Mapped[int] = mapped_column(ForeignKey("lti_contexts.id", ondelete="CASCADE"))
    assignment: Mapped[str] = mapped_column(String(100))
    student_id: Mapped[int] = mapped_column(ForeignKey("students.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(16))
    score_given: Mapped[float | None] = mapped_column(Float)
    score_maximum: Mapped[float | None] = mapped_column(Float)
    synced_score: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(Text)
    synced_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)


class LtiSession(Base):
    """A browser session opened by an LTI launch (the pages' cookie holds its ``gls_``
    token; only the hash is stored). It lets a person in without ever seeing a token; their
    own CLI token stays theirs to show and rotate."""

    __tablename__ = "lti_sessions"

    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    student_id: Mapped[int | None] = mapped_column(ForeignKey("students.id", ondelete="CASCADE"))
    staff_id: Mapped[int | None] = mapped_column(
        ForeignKey("staff_members.id", ondelete="CASCADE"))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
class SimilarityStatus(enum.StrEnum):
    """Lifecycle of a similarity run: ``queued -> running -> finished|error``; a running run
    whose lease expires goes back to ``queued`` until ``max_attempts`` claims were used."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    ERROR = "error"


class SimilaritySourceKind(enum.StrEnum):
    """``reference``: the assignment's own reference solution (written by the review job
    from the grader's folder); ``public``: a public kernel staff added (a library's, a
    tutorial's); ``retired``: a reference the grader has since replaced, kept for the pairs
    of earlier reviews (never compared again)."""

    REFERENCE = "reference"
    PUBLIC = "public"
    RETIRED = "retired"


class SimilaritySource(Base):
    """A known public kernel of an assignment, compared with every student's submission.
    Its text is hostile like a submission's (staff paste it from anywhere)."""

    __tablename__ = "similarity_sources"
    __table_args__ = (
        CheckConstraint("kind IN ('reference', 'public', 'retired')", name="kind"),
        Index("uq_similarity_sources_assignment_name", "assignment", "name", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    assignment: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(16), default=SimilaritySourceKind.PUBLIC)
    name: Mapped[str] = mapped_column(String(200))
    # Where it comes from (a URL, a book), for the reviewer; never fetched.
    origin: Mapped[str | None] = mapped_column(Text)
    source_text: Mapped[str] = mapped_column(Text)
    source_sha256: Mapped[str] = mapped_column(String(64))
    added_by: Mapped[str] = mapped_column(String(200))
    added_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)


class SimilarityRun(Base):
    """One similarity review of an assignment: a job (claimed by a worker with a lease,
    like a grading), then its outcome. The latest finished run is the one staff read."""

    __tablename__ = "similarity_runs"
    __table_args__ = (
        CheckConstraint("status IN ('queued', 'running', 'finished', 'error')", name="status"),
        CheckConstraint("threshold > 0 AND threshold <= 1", name="threshold"),
        Index("ix_similarity_runs_assignment_id", "assignment", "id"),
        Index("ix_similarity_runs_status_created_at", "status", "created_at", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    assignment: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(16), default=SimilarityStatus.QUEUED)
    # Pairs at or above it are stored (the larger of the two sides' shares, 0..1].
    threshold: Mapped[float] = mapped_column(Float)
    requested_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker_id: Mapped[str | None] = mapped_column(String(200))
    lease_token: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    error_message: Mapped[str | None] = mapped_column(Text)
    # The tool and its version (``copydetect 0.5.0``) and its parameters (k-gram length...).
    tool: Mapped[str | None] = mapped_column(String(100))
    parameters: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    submissions_compared: Mapped[int | None] = mapped_column(Integer)
    sources_compared: Mapped[int | None] = mapped_column(Integer)
    pairs_compared: Mapped[int | None] = mapped_column(Integer)
    duration_s: Mapped[float | None] = mapped_column(Float)


class SimilarityPair(Base):
    """A pair a run found at or above its threshold: a submission (left) and another
    student's submission or a known source (right), each side's share of matched code and
    the matched fragments as ``[[start, end], ...]`` character offsets into its text. The
    submission ids are the uploads compared: each student's counted submission when the run
    read them, or their latest upload (the run's parameters say which)."""

    __tablename__ = "similarity_pairs"
    __table_args__ = (
        CheckConstraint("(right_submission_id IS NULL) <> (right_source_id IS NULL)",
                        name="one_right"),
        Index("ix_similarity_pairs_run_id_similarity", "run_id", "similarity"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("similarity_runs.id", ondelete="CASCADE"))
    left_submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"))
    right_submission_id: Mapped[int | None] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"))
    right_source_id: Mapped[int | None] = mapped_column(
        ForeignKey("similarity_sources.id", ondelete="CASCADE"))
    similarity: Mapped[float] = mapped_column(Float)
    left_similarity: Mapped[float] = mapped_column(Float)
    right_similarity: Mapped[float] = mapped_column(Float)
    matched_chars: Mapped[int] = mapped_column(Integer)
    left_fragments: Mapped[list[list[int]]] = mapped_column(JSON)
    right_fragments: Mapped[list[list[int]]] = mapped_column(JSON)
    # Staff's mark: looked at (nothing is decided here; a disqualification is its own action).
    reviewed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    reviewed_by: Mapped[str | None] = mapped_column(String(200))
    review_note: Mapped[str | None] = mapped_column(Text)

    left: Mapped[Submission] = relationship(foreign_keys=[left_submission_id], viewonly=True)
    right: Mapped[Submission | None] = relationship(foreign_keys=[right_submission_id],
                                                    viewonly=True)
    source: Mapped[SimilaritySource | None] = relationship(viewonly=True)
    # Its run's parameters say what each side was (submissions/similarity.py compared_as).
    run: Mapped[SimilarityRun] = relationship(viewonly=True)
