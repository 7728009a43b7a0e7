"""ORM models (SQLAlchemy 2.0). The schema itself is created only by the Alembic migrations;
tests check that these models and the migrations agree.

Tables:
- ``students``: a name (unique, compared through ``name_key``) and the sha256 of the
  student's bearer token (never the token).
- ``submissions``: one uploaded file, its grading state and its stored result. This table
  is also the job queue (see submissions/repository.py for the claim/lease protocol).
- ``check_verdicts``: one row per correctness check of a finished grading.
- ``worker_heartbeats``: one row per worker process, for /healthz.
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
    """Lifecycle of a submission. ``queued -> running -> passed|failed|error``; a running job
    whose lease expires, or whose grading broke for infrastructure reasons, goes back to
    ``queued`` until ``max_attempts`` is reached."""

    QUEUED = "queued"
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"


TERMINAL_STATUSES = (SubmissionStatus.PASSED, SubmissionStatus.FAILED, SubmissionStatus.ERROR)

#: error_kind of a grading that broke because of us (grader, machine, database), not the student.
INFRASTRUCTURE_ERROR = "infrastructure"


class Base(DeclarativeBase):
    """Declarative base with the project's constraint naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Student(Base):
    """A student who may upload submissions, identified by a bearer token."""

    __tablename__ = "students"
    __table_args__ = (Index("uq_students_name_key", "name_key", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    # service.student_name_key(name): trimmed and case-folded; unique (uq_students_name_key),
    # so no two students share a name up to case and surrounding whitespace. Case folding
    # may lengthen a string (at most 3x: "ß" -> "ss"), hence the wider column. Computed in
    # Python, not SQL, so SQLite and PostgreSQL compare alike (their lower() functions differ).
    name_key: Mapped[str] = mapped_column(String(600))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)

    submissions: Mapped[list[Submission]] = relationship(back_populates="student")


class Submission(Base):
    """One uploaded file and its grading; also a job in the queue."""

    __tablename__ = "submissions"
    __table_args__ = (
        CheckConstraint(
            "status IN ('queued', 'running', 'passed', 'failed', 'error')", name="status"
        ),
        Index("ix_submissions_status_created_at", "status", "created_at", "id"),
        Index("ix_submissions_student_id_created_at", "student_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    student_id: Mapped[int] = mapped_column(ForeignKey("students.id", ondelete="CASCADE"))
    assignment: Mapped[str] = mapped_column(String(100))
    # The client's file name, for display only; never used as a path.
    original_filename: Mapped[str | None] = mapped_column(String(255))
    source_text: Mapped[str] = mapped_column(Text)
    source_sha256: Mapped[str] = mapped_column(String(64))
    source_bytes: Mapped[int] = mapped_column(Integer)

    status: Mapped[str] = mapped_column(String(16), default=SubmissionStatus.QUEUED)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utc_now)

    # Queue state. attempts counts claims; lease_token identifies the current claim.
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker_id: Mapped[str | None] = mapped_column(String(200))
    lease_token: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    last_attempt_error: Mapped[str | None] = mapped_column(Text)

    # Result (written in one transaction with the check_verdicts rows).
    seed: Mapped[int | None] = mapped_column(BigInteger)
    error_kind: Mapped[str | None] = mapped_column(String(50))
    error_message: Mapped[str | None] = mapped_column(Text)
    headline_speedup: Mapped[float | None] = mapped_column(Float)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    benchmark: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    versions: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    device: Mapped[str | None] = mapped_column(String(200))
    grader_exit_code: Mapped[int | None] = mapped_column(Integer)
    grading_duration_s: Mapped[float | None] = mapped_column(Float)
    log_text: Mapped[str | None] = mapped_column(Text)
    log_truncated: Mapped[bool | None] = mapped_column(Boolean)
    grader_stderr: Mapped[str | None] = mapped_column(Text)

    student: Mapped[Student] = relationship(back_populates="submissions")
    checks: Mapped[list[CheckVerdict]] = relationship(
        back_populates="submission",
        order_by="CheckVerdict.position",
        cascade="all, delete-orphan",
        passive_deletes=True,
    )


class CheckVerdict(Base):
    """The verdict of one named correctness check of one grading."""

    __tablename__ = "check_verdicts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), index=True
    )
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(200))
    passed: Mapped[bool] = mapped_column(Boolean)
    skipped: Mapped[bool] = mapped_column(Boolean)
    message: Mapped[str | None] = mapped_column(Text)
    # Every other key of the check's entry in the result document (max_abs_err, tolerance...).
    numbers: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    submission: Mapped[Submission] = relationship(back_populates="checks")


class WorkerHeartbeat(Base):
    """Liveness of one worker process, refreshed by its heartbeat thread."""

    __tablename__ = "worker_heartbeats"

    worker_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    last_seen_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    current_submission_id: Mapped[int | None] = mapped_column(Integer)
