"""Every SQL statement of the service. Functions flush but never commit: the transaction
belongs to the caller (the request dependency in api/deps.py, or the worker's job wrapper).

Concurrency model of the queue (the ``submissions`` table is the queue):

- A job is *claimed* by one UPDATE that moves it from ``queued`` to ``running`` and stamps a
  fresh random ``lease_token`` and ``lease_expires_at``. On PostgreSQL the row is chosen by a
  sub-select with ``FOR UPDATE SKIP LOCKED``: concurrent claimers lock different rows, never
  wait on each other, and the outer ``status = 'queued'`` predicate is evaluated while the row
  lock is held, so a row is claimed by exactly one transaction. On SQLite every transaction
  starts with ``BEGIN IMMEDIATE`` (see submissions/db.py), so claims are serialised by the
  database write lock and the same single UPDATE is atomic.
- Every later write by the claiming worker (lease renewal, result, infrastructure failure)
  is conditional on ``status = 'running' AND lease_token = :token``. If the lease expired and
  the job was re-queued (and perhaps claimed by another worker), the old worker's write
  matches no row and is discarded; so a job is never graded twice at the same time *as far as
  its stored outcome is concerned*, and the old worker stops grading when its renewal fails.
- Expired leases are swept by any worker before it claims: the job goes back to ``queued``
  (or to ``error`` with kind ``infrastructure`` once ``max_attempts`` claims were used).

All times are aware UTC datetimes passed in by the caller (workers on different hosts are
assumed to have synchronised clocks, e.g. NTP; leases are tens of seconds long).
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import and_, case, delete, func, literal_column, not_, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from submissions.models import (
    INFRASTRUCTURE_ERROR,
    CheckVerdict,
    Student,
    Submission,
    SubmissionStatus,
    WorkerHeartbeat,
)

if TYPE_CHECKING:
    from submissions.grading import GradingOutcome


# --------------------------------------------------------------------------- students


def insert_student(
    session: Session, *, name: str, name_key: str, token_sha256: str, now: dt.datetime
) -> Student | None:
    """Insert a student with the sha256 of their token; flushes to assign the id.

    Returns None, inserting nothing, when another student already has `name_key` (the
    unique constraint decides, so two concurrent inserts of one name cannot both succeed).
    The insert runs in a savepoint, so the session stays usable after a conflict.
    """
    student = Student(name=name, name_key=name_key, token_sha256=token_sha256, created_at=now)
    try:
        with session.begin_nested():
            session.add(student)
    except IntegrityError:
        if find_student_by_name_key(session, name_key=name_key) is None:
            raise  # some other constraint
        return None
    return student


def find_student_by_name_key(session: Session, *, name_key: str) -> Student | None:
    """The student whose normalised name is `name_key` (unique constraint), or None."""
    return session.scalars(select(Student).where(Student.name_key == name_key)).first()


def find_student_by_token_sha256(session: Session, *, token_sha256: str) -> Student | None:
    """The student whose token hashes to `token_sha256` (unique index), or None."""
    return session.scalars(select(Student).where(Student.token_sha256 == token_sha256)).first()


def get_student(session: Session, *, student_id: int) -> Student | None:
    """The student with id `student_id`, or None."""
    return session.get(Student, student_id)


def list_students(session: Session) -> Sequence[Student]:
    """All students, in creation order."""
    return session.scalars(select(Student).order_by(Student.id)).all()


def lock_student(session: Session, *, student_id: int) -> None:
    """Serialise concurrent uploads of one student until the transaction ends.

    PostgreSQL: ``SELECT ... FOR UPDATE`` on the student row, so two simultaneous uploads
    cannot both pass the rate-limit check. SQLite: a no-op, because the transaction already
    holds the database write lock (``BEGIN IMMEDIATE``).
    """
    session.execute(select(Student.id).where(Student.id == student_id).with_for_update())


# ------------------------------------------------------------------------ submissions


def _counts_toward_rate_limit():  # noqa: ANN202 - a SQL expression
    """Submissions that count: all except infrastructure errors (our fault, not theirs)."""
    return not_(
        and_(
            Submission.status == SubmissionStatus.ERROR,
            func.coalesce(Submission.error_kind, "") == INFRASTRUCTURE_ERROR,
        )
    )


def counted_submission_times(
    session: Session, *, student_id: int, since: dt.datetime
) -> list[dt.datetime]:
    """Upload times (ascending) of the student's submissions since `since` that count
    toward the rate limit. Call after `lock_student` in the same transaction."""
    rows = session.scalars(
        select(Submission.created_at)
        .where(
            Submission.student_id == student_id,
            Submission.created_at > since,
            _counts_toward_rate_limit(),
        )
        .order_by(Submission.created_at)
    )
    return list(rows)


def insert_submission(
    session: Session,
    *,
    student_id: int,
    assignment: str,
    source_text: str,
    source_sha256: str,
    source_bytes: int,
    original_filename: str | None,
    now: dt.datetime,
) -> Submission:
    """Insert a queued submission; flushes so that ``id`` is assigned."""
    submission = Submission(
        student_id=student_id,
        assignment=assignment,
        source_text=source_text,
        source_sha256=source_sha256,
        source_bytes=source_bytes,
        original_filename=original_filename,
        status=SubmissionStatus.QUEUED,
        attempts=0,
        created_at=now,
    )
    session.add(submission)
    session.flush()
    return submission


def get_submission(session: Session, *, submission_id: int) -> Submission | None:
    """The submission with its check verdicts and student loaded, or None."""
    return session.scalars(
        select(Submission)
        .where(Submission.id == submission_id)
        .options(selectinload(Submission.checks), selectinload(Submission.student))
    ).first()


def list_submissions(
    session: Session, *, student_id: int | None, limit: int, offset: int
) -> Sequence[Submission]:
    """Submissions, newest first, optionally of one student, with their checks loaded."""
    statement = (
        select(Submission)
        .options(selectinload(Submission.checks), selectinload(Submission.student))
        .order_by(Submission.id.desc())
        .limit(limit)
        .offset(offset)
    )
    if student_id is not None:
        statement = statement.where(Submission.student_id == student_id)
    return session.scalars(statement).all()


# ------------------------------------------------------------------------------ queue


@dataclass(frozen=True)
class ClaimedJob:
    """What a worker needs to grade one claimed submission."""

    submission_id: int
    lease_token: str
    attempt: int
    assignment: str
    source_text: str
    seed: int | None


def claim_next_submission(
    session: Session, *, worker_id: str, lease_s: float, now: dt.datetime
) -> ClaimedJob | None:
    """Atomically claim the oldest queued submission for `worker_id`, or return None.

    Concurrency: safe with any number of concurrent claimers on PostgreSQL (sub-select
    ``FOR UPDATE SKIP LOCKED``; a locked row is skipped, never double-claimed) and on SQLite
    (the transaction holds the write lock from BEGIN). The caller must commit promptly so
    that the lease starts counting from a visible state.
    """
    oldest_queued = (
        select(Submission.id)
        .where(Submission.status == SubmissionStatus.QUEUED)
        .order_by(Submission.created_at, Submission.id)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    lease_token = secrets.token_hex(16)
    claimed = session.execute(
        update(Submission)
        .where(Submission.id == oldest_queued, Submission.status == SubmissionStatus.QUEUED)
        .values(
            status=SubmissionStatus.RUNNING,
            attempts=Submission.attempts + 1,
            worker_id=worker_id,
            lease_token=lease_token,
            lease_expires_at=now + dt.timedelta(seconds=lease_s),
            started_at=now,
        )
        .returning(
            Submission.id,
            Submission.attempts,
            Submission.assignment,
            Submission.source_text,
            Submission.seed,
        )
        .execution_options(synchronize_session=False)
    ).first()
    if claimed is None:
        return None
    return ClaimedJob(
        submission_id=claimed.id,
        lease_token=lease_token,
        attempt=claimed.attempts,
        assignment=claimed.assignment,
        source_text=claimed.source_text,
        seed=claimed.seed,
    )


def _held_lease(submission_id: int, lease_token: str):  # noqa: ANN202 - a SQL expression
    return and_(
        Submission.id == submission_id,
        Submission.status == SubmissionStatus.RUNNING,
        Submission.lease_token == lease_token,
    )


def renew_lease(
    session: Session, *, submission_id: int, lease_token: str, lease_s: float, now: dt.datetime
) -> bool:
    """Extend a held lease to ``now + lease_s``. Returns False if the lease is no longer
    held (it expired and the job was re-queued or finished elsewhere): the caller must then
    stop grading and discard its result."""
    result = session.execute(
        update(Submission)
        .where(_held_lease(submission_id, lease_token))
        .values(lease_expires_at=now + dt.timedelta(seconds=lease_s))
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


@dataclass(frozen=True)
class ExpiredLeaseSweep:
    """Outcome of `requeue_expired_leases`: submission ids re-queued and given up on."""

    requeued: list[int]
    abandoned: list[int]


def requeue_expired_leases(
    session: Session, *, now: dt.datetime, max_attempts: int
) -> ExpiredLeaseSweep:
    """Re-queue running jobs whose lease expired (their worker died or hung); jobs that
    already used `max_attempts` claims become ``error`` / ``infrastructure`` instead.

    Concurrency: each UPDATE re-checks ``lease_expires_at < now`` under the row lock, so two
    sweepers cannot both act on one job, and a worker that renews in time keeps its job.
    """
    expired = and_(
        Submission.status == SubmissionStatus.RUNNING,
        Submission.lease_expires_at < now,
    )
    abandoned = session.scalars(
        update(Submission)
        .where(expired, Submission.attempts >= max_attempts)
        .values(
            status=SubmissionStatus.ERROR,
            error_kind=INFRASTRUCTURE_ERROR,
            error_message=(
                "grading did not finish: the worker stopped renewing its lease "
                f"(crashed, killed or hung) on each of {max_attempts} attempt(s)"
            ),
            last_attempt_error="lease expired: worker lost",
            lease_token=None,
            lease_expires_at=None,
            finished_at=now,
        )
        .returning(Submission.id)
        .execution_options(synchronize_session=False)
    ).all()
    requeued = session.scalars(
        update(Submission)
        .where(expired, Submission.attempts < max_attempts)
        .values(
            status=SubmissionStatus.QUEUED,
            last_attempt_error="lease expired: worker lost",
            lease_token=None,
            lease_expires_at=None,
        )
        .returning(Submission.id)
        .execution_options(synchronize_session=False)
    ).all()
    return ExpiredLeaseSweep(requeued=list(requeued), abandoned=list(abandoned))


def record_grading_outcome(
    session: Session,
    *,
    submission_id: int,
    lease_token: str,
    outcome: GradingOutcome,
    now: dt.datetime,
) -> bool:
    """Store a finished grading (status, error, result document, benchmark, log) and one
    `CheckVerdict` row per check. Returns False, writing nothing, if the lease is no longer
    held. The caller commits (or rolls back) everything as one transaction."""
    result = session.execute(
        update(Submission)
        .where(_held_lease(submission_id, lease_token))
        .values(
            status=outcome.status,
            error_kind=outcome.error_kind,
            error_message=outcome.error_message,
            result=outcome.result_document,
            benchmark=outcome.benchmark,
            headline_speedup=outcome.headline_speedup,
            versions=outcome.versions,
            device=outcome.device,
            grader_exit_code=outcome.exit_code,
            grading_duration_s=outcome.duration_s,
            log_text=outcome.log_text,
            log_truncated=outcome.log_truncated,
            grader_stderr=outcome.grader_stderr,
            lease_token=None,
            lease_expires_at=None,
            finished_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        return False
    session.execute(delete(CheckVerdict).where(CheckVerdict.submission_id == submission_id))
    session.add_all(
        CheckVerdict(
            submission_id=submission_id,
            position=position,
            name=check.name,
            passed=check.passed,
            skipped=check.skipped,
            message=check.message,
            numbers=check.numbers,
        )
        for position, check in enumerate(outcome.checks)
    )
    session.flush()
    return True


def record_infrastructure_failure(
    session: Session,
    *,
    submission_id: int,
    lease_token: str,
    reason: str,
    attempt: int,
    max_attempts: int,
    exit_code: int | None,
    grader_stderr: str | None,
    duration_s: float | None,
    now: dt.datetime,
) -> SubmissionStatus | None:
    """Record a grading that broke for reasons not caused by the submission.

    Re-queues the job while ``attempt < max_attempts``; afterwards marks it ``error`` with
    ``error_kind = 'infrastructure'`` (which does not count toward the rate limit). Returns
    the new status, or None if the lease is no longer held (nothing written).
    """
    final = attempt >= max_attempts
    values: dict[str, object] = {
        "last_attempt_error": reason,
        "grader_exit_code": exit_code,
        "grader_stderr": grader_stderr,
        "grading_duration_s": duration_s,
        "lease_token": None,
        "lease_expires_at": None,
    }
    if final:
        values |= {
            "status": SubmissionStatus.ERROR,
            "error_kind": INFRASTRUCTURE_ERROR,
            "error_message": f"grading broke for reasons outside your submission on each of "
            f"{attempt} attempt(s) (infrastructure error; it does not count against your "
            f"rate limit). Last reason: {reason}",
            "finished_at": now,
        }
    else:
        values["status"] = SubmissionStatus.QUEUED
    result = session.execute(
        update(Submission)
        .where(_held_lease(submission_id, lease_token))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        return None
    return SubmissionStatus.ERROR if final else SubmissionStatus.QUEUED


def release_claim(session: Session, *, submission_id: int, lease_token: str) -> bool:
    """Hand a claimed job back to the queue without charging an attempt (the worker is
    shutting down). Returns False if the lease was no longer held."""
    result = session.execute(
        update(Submission)
        .where(_held_lease(submission_id, lease_token))
        .values(
            status=SubmissionStatus.QUEUED,
            attempts=Submission.attempts - 1,
            lease_token=None,
            lease_expires_at=None,
            last_attempt_error="worker shut down during grading",
        )
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


# -------------------------------------------------------------------------- workers


def upsert_worker_heartbeat(
    session: Session,
    *,
    worker_id: str,
    hostname: str,
    pid: int,
    started_at: dt.datetime,
    current_submission_id: int | None,
    now: dt.datetime,
) -> None:
    """Insert or refresh the heartbeat row of `worker_id`. Only the worker that owns the id
    writes its row, so the update-then-insert pair cannot race with another writer."""
    updated = session.execute(
        update(WorkerHeartbeat)
        .where(WorkerHeartbeat.worker_id == worker_id)
        .values(last_seen_at=now, current_submission_id=current_submission_id)
        .execution_options(synchronize_session=False)
    )
    if updated.rowcount == 0:
        session.add(
            WorkerHeartbeat(
                worker_id=worker_id,
                hostname=hostname,
                pid=pid,
                started_at=started_at,
                last_seen_at=now,
                current_submission_id=current_submission_id,
            )
        )
        session.flush()


def delete_worker_heartbeat(session: Session, *, worker_id: str) -> None:
    """Remove the heartbeat row of a worker that shuts down cleanly."""
    session.execute(delete(WorkerHeartbeat).where(WorkerHeartbeat.worker_id == worker_id))


def list_worker_heartbeats(session: Session) -> Sequence[WorkerHeartbeat]:
    """All worker heartbeat rows, most recently seen first."""
    return session.scalars(
        select(WorkerHeartbeat).order_by(WorkerHeartbeat.last_seen_at.desc())
    ).all()


# --------------------------------------------------------------------- observability


def ping(session: Session) -> None:
    """Round-trip to the database. Raises sqlalchemy.exc.DBAPIError when unreachable."""
    session.execute(text("SELECT 1"))


def count_submissions_by_status(session: Session) -> dict[str, int]:
    """Number of submissions per status (queue depth is the ``queued`` count)."""
    rows = session.execute(
        select(Submission.status, func.count()).group_by(Submission.status)
    ).all()
    return {status: count for status, count in rows}


def count_gradings_by_verdict(session: Session) -> dict[tuple[str, str], int]:
    """Finished gradings per (status, error_kind or ""), e.g. ("error", "infrastructure")."""
    error_kind = func.coalesce(Submission.error_kind, literal_column("''"))
    rows = session.execute(
        select(Submission.status, error_kind, func.count())
        .where(Submission.finished_at.is_not(None))
        .group_by(Submission.status, error_kind)
    ).all()
    return {(status, kind): count for status, kind, count in rows}


@dataclass(frozen=True)
class DurationHistogram:
    """Cumulative bucket counts of grading durations (seconds), as Prometheus wants them."""

    buckets: list[tuple[float, int]]
    count: int
    total_s: float


def grading_duration_histogram(session: Session, *, bounds: Sequence[float]) -> DurationHistogram:
    """Histogram of ``grading_duration_s`` over finished gradings, computed in one query."""
    duration = Submission.grading_duration_s
    columns = [func.sum(case((duration <= bound, 1), else_=0)) for bound in bounds]
    row = session.execute(
        select(func.count(duration), func.coalesce(func.sum(duration), 0.0), *columns).where(
            Submission.finished_at.is_not(None), duration.is_not(None)
        )
    ).one()
    count, total, *cumulative = row
    return DurationHistogram(
        buckets=[(bound, int(n or 0)) for bound, n in zip(bounds, cumulative, strict=True)],
        count=int(count),
        total_s=float(total),
    )


# ------------------------------------------------------------------------ leaderboard


@dataclass(frozen=True)
class LeaderboardEntry:
    """One student's best passing submission."""

    student_id: int
    student_name: str
    submission_id: int
    headline_speedup: float | None
    submitted_at: dt.datetime
    device: str | None


def leaderboard_entries(session: Session, *, assignment: str) -> list[LeaderboardEntry]:
    """Best passing submission per student, best first: by headline speedup (higher first;
    ties: earlier submission first), then students whose passing submissions have no GPU
    benchmark, by submission time. A query over stored results; nothing is recomputed."""

    def ranking(columns):  # noqa: ANN001, ANN202
        return (
            case((columns.headline_speedup.is_(None), 1), else_=0),
            columns.headline_speedup.desc(),
            columns.created_at,
            columns.id,
        )

    per_student = (
        select(
            Submission.id,
            Submission.student_id,
            Submission.headline_speedup,
            Submission.created_at,
            Submission.device,
            func.row_number()
            .over(partition_by=Submission.student_id, order_by=ranking(Submission))
            .label("position_for_student"),
        )
        .where(
            Submission.status == SubmissionStatus.PASSED,
            Submission.assignment == assignment,
        )
        .subquery()
    )
    rows = session.execute(
        select(per_student, Student.name)
        .join(Student, Student.id == per_student.c.student_id)
        .where(per_student.c.position_for_student == 1)
        .order_by(*ranking(per_student.c))
    ).all()
    return [
        LeaderboardEntry(
            student_id=row.student_id,
            student_name=row.name,
            submission_id=row.id,
            headline_speedup=row.headline_speedup,
            submitted_at=row.created_at,
            device=row.device,
        )
        for row in rows
    ]

