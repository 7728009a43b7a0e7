"""The job queue: the ``gradings`` table. Every run of the grader on a submission (its
upload's grading, a staff regrade, a final ranking run) is one row, claimed by a worker,
leased, and finalised once.

Concurrency model:

- A job is *claimed* by one UPDATE that moves it from ``queued`` to ``running`` and stamps a
  fresh random ``lease_token`` and ``lease_expires_at``. On PostgreSQL the row is chosen by a
  sub-select with ``FOR UPDATE SKIP LOCKED``: concurrent claimers lock different rows, never
  wait on each other, and the outer ``status = 'queued'`` predicate is evaluated while the row
  lock is held, so a row is claimed by exactly one transaction. On SQLite every transaction
  starts with ``BEGIN IMMEDIATE`` (see submissions/db.py), so claims are serialised by the
  database write lock and the same single UPDATE is atomic. Claim order: ``priority`` (0:
  students' uploads; 1: staff regrades and final runs, so a regrade of the whole class never
  delays a student's verdict), then oldest first.
- Every later write by the claiming worker (lease renewal, result, infrastructure failure)
  is conditional on ``status = 'running' AND lease_token = :token`` (the token is random per
  claim, so it names one grading). If the lease expired and the job was re-queued (and
  perhaps claimed by another worker), the old worker's write matches no row and is
  discarded; so a job's stored outcome is written exactly once, and the old worker stops
  grading when its renewal fails.
- One exception to the token fence, for results only: a worker whose lease was lost while
  it could not reach the database (an outage longer than the lease) still stores its
  finished grading if nobody finished it since (`store_finished_grading`, fenced by status
  and ``attempts``); it clears the token, which fences out any worker that re-claimed it.
- Expired leases are swept by any worker before it claims: the job goes back to ``queued``
  (or to ``error`` with kind ``infrastructure`` once ``max_attempts`` claims were used).
- Which grading *counts* for a submission (``is_current``) is decided elsewhere: a
  submission's upload grading is current from its insertion; a regrade becomes current only
  when staff apply its batch (submissions/repository/regrades.py). The queue never changes it.

The public functions keep the submission id in their signatures (the worker logs and
reports by submission); together with the lease token it identifies the claimed grading.
All times are aware UTC datetimes passed in by the caller (workers on different hosts are
assumed to have synchronised clocks, e.g. NTP; leases are tens of seconds long).
"""

from __future__ import annotations

import datetime as dt
import enum
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.orm import Session

from submissions.models import (
    INFRASTRUCTURE_ERROR,
    CheckVerdict,
    Grading,
    GradingPurpose,
    Submission,
    SubmissionStatus,
)

if TYPE_CHECKING:
    from submissions.grading import GradingOutcome

__all__ = [
    "ClaimedJob",
    "ExpiredLeaseSweep",
    "FinishedGradingWrite",
    "PRIORITY_STAFF",
    "PRIORITY_UPLOAD",
    "claim_next_submission",
    "insert_grading",
    "queue_position",
    "record_grading_outcome",
    "record_infrastructure_failure",
    "record_stage",
    "release_claim",
    "renew_lease",
    "requeue_expired_leases",
    "store_finished_grading",
]

#: Claim priorities (lower first).
PRIORITY_UPLOAD, PRIORITY_STAFF = 0, 1


def insert_grading(
    session: Session,
    *,
    submission_id: int,
    purpose: GradingPurpose,
    seed: int | None,
    is_current: bool,
    priority: int,
    now: dt.datetime,
    requested_by: str | None = None,
    regrade_batch_id: int | None = None,
    final_run_id: int | None = None,
    replaces_grading_id: int | None = None,
) -> Grading:
    """Queue one grading of a submission; flushes so that ``id`` is assigned.

    `is_current` must be True only for a submission's first grading (the upload's); the
    partial unique index ``uq_gradings_current_submission_id`` refuses a second current one.
    """
    grading = Grading(
        submission_id=submission_id,
        purpose=purpose,
        is_current=is_current,
        priority=priority,
        seed=seed,
        requested_by=requested_by,
        regrade_batch_id=regrade_batch_id,
        final_run_id=final_run_id,
        replaces_grading_id=replaces_grading_id,
        status=SubmissionStatus.QUEUED,
        attempts=0,
        created_at=now,
    )
    session.add(grading)
    session.flush()
    return grading


@dataclass(frozen=True)
class ClaimedJob:
    """What a worker needs to grade one claimed grading of a submission."""

    submission_id: int
    lease_token: str
    attempt: int
    assignment: str
    source_text: str
    seed: int | None
    grading_id: int
    purpose: str


def queue_position(session: Session, *, grading: Grading) -> int | None:
    """Where the queued `grading` stands in the claim order (1: claimed next), or None when it
    is not queued. The order is ``claim_next_submission``'s: priority, then oldest, then id."""
    if grading.status != SubmissionStatus.QUEUED:
        return None
    ahead = session.execute(
        select(func.count())
        .select_from(Grading)
        .where(
            Grading.status == SubmissionStatus.QUEUED,
            or_(
                Grading.priority < grading.priority,
                and_(Grading.priority == grading.priority, Grading.created_at < grading.created_at),
                and_(Grading.priority == grading.priority, Grading.created_at == grading.created_at,
                     Grading.id < grading.id),
            ),
        )
    ).scalar_one()
    return int(ahead) + 1


def claim_next_submission(
    session: Session, *, worker_id: str, lease_s: float, now: dt.datetime
) -> ClaimedJob | None:
    """Atomically claim the next queued grading for `worker_id` (lowest priority value,
    then oldest), or return None.

    Concurrency: safe with any number of concurrent claimers on PostgreSQL (sub-select
    ``FOR UPDATE SKIP LOCKED``; a locked row is skipped, never double-claimed) and on SQLite
    (the transaction holds the write lock from BEGIN). The caller must commit promptly so
    that the lease starts counting from a visible state.
    """
    next_queued = (
        select(Grading.id)
        .where(Grading.status == SubmissionStatus.QUEUED)
        .order_by(Grading.priority, Grading.created_at, Grading.id)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    lease_token = secrets.token_hex(16)
    claimed = session.execute(
        update(Grading)
        .where(Grading.id == next_queued, Grading.status == SubmissionStatus.QUEUED)
        .values(
            status=SubmissionStatus.RUNNING,
            attempts=Grading.attempts + 1,
            worker_id=worker_id,
            lease_token=lease_token,
            lease_expires_at=now + dt.timedelta(seconds=lease_s),
            started_at=now,
            stage=None,
            stage_started_at=None,
        )
        .returning(
            Grading.id, Grading.submission_id, Grading.attempts, Grading.seed, Grading.purpose
        )
        .execution_options(synchronize_session=False)
    ).first()
    if claimed is None:
        return None
    submission = session.execute(
        select(Submission.assignment, Submission.source_text).where(
            Submission.id == claimed.submission_id
        )
    ).one()
    return ClaimedJob(
        submission_id=claimed.submission_id,
        lease_token=lease_token,
        attempt=claimed.attempts,
        assignment=submission.assignment,
        source_text=submission.source_text,
        seed=claimed.seed,
        grading_id=claimed.id,
        purpose=claimed.purpose,
    )


def _held_lease(submission_id: int, lease_token: str):  # noqa: ANN202 - a SQL expression
    return and_(
        Grading.submission_id == submission_id,
        Grading.status == SubmissionStatus.RUNNING,
        Grading.lease_token == lease_token,
    )


def renew_lease(
    session: Session, *, submission_id: int, lease_token: str, lease_s: float, now: dt.datetime
) -> bool:
    """Extend a held lease to ``now + lease_s``. Returns False if the lease is no longer
    held (it expired and the job was re-queued or finished elsewhere): the caller must then
    stop grading and discard its result."""
    result = session.execute(
        update(Grading)
        .where(_held_lease(submission_id, lease_token))
        .values(lease_expires_at=now + dt.timedelta(seconds=lease_s))
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


def record_stage(
    session: Session, *, submission_id: int, lease_token: str, stage: str, started_at: dt.datetime
) -> bool:
    """Store the stage a running grading entered (grader/stages.py), only while its lease is
    held. Returns False when it is not (the caller ignores that: the lease loop decides)."""
    result = session.execute(
        update(Grading)
        .where(_held_lease(submission_id, lease_token))
        .values(stage=stage, stage_started_at=started_at)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


@dataclass(frozen=True)
class ExpiredLeaseSweep:
    """Outcome of `requeue_expired_leases`: ids of the submissions whose grading was
    re-queued, and of those whose grading was given up on."""

    requeued: list[int]
    abandoned: list[int]


def requeue_expired_leases(
    session: Session, *, now: dt.datetime, max_attempts: int
) -> ExpiredLeaseSweep:
    """Re-queue running gradings whose lease expired (their worker died or hung); gradings
    that already used `max_attempts` claims become ``error`` / ``infrastructure`` instead.

    Concurrency: each UPDATE re-checks ``lease_expires_at < now`` under the row lock, so two
    sweepers cannot both act on one job, and a worker that renews in time keeps its job.
    """
    expired = and_(
        Grading.status == SubmissionStatus.RUNNING,
        Grading.lease_expires_at < now,
    )
    abandoned = session.scalars(
        update(Grading)
        .where(expired, Grading.attempts >= max_attempts)
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
        .returning(Grading.submission_id)
        .execution_options(synchronize_session=False)
    ).all()
    requeued = session.scalars(
        update(Grading)
        .where(expired, Grading.attempts < max_attempts)
        .values(
            status=SubmissionStatus.QUEUED,
            last_attempt_error="lease expired: worker lost",
            lease_token=None,
            lease_expires_at=None,
        )
        .returning(Grading.submission_id)
        .execution_options(synchronize_session=False)
    ).all()
    return ExpiredLeaseSweep(requeued=list(requeued), abandoned=list(abandoned))


def _outcome_values(outcome: GradingOutcome, now: dt.datetime) -> dict[str, object]:
    """The ``gradings`` columns a finished grading sets (the lease is released)."""
    grader_version = (outcome.versions or {}).get("grader")
    return {
        "status": outcome.status,
        "error_kind": outcome.error_kind,
        "error_message": outcome.error_message,
        "result": outcome.result_document,
        "benchmark": outcome.benchmark,
        "headline_speedup": outcome.headline_speedup,
        "versions": outcome.versions,
        "grader_version": None if grader_version is None else str(grader_version)[:100],
        "device": outcome.device,
        "grader_exit_code": outcome.exit_code,
        "grading_duration_s": outcome.duration_s,
        "log_text": outcome.log_text,
        "log_truncated": outcome.log_truncated,
        "grader_stderr": outcome.grader_stderr,
        "lease_token": None,
        "lease_expires_at": None,
        "finished_at": now,
    }


def _store_check_verdicts(session: Session, *, grading_id: int, outcome: GradingOutcome) -> None:
    session.execute(delete(CheckVerdict).where(CheckVerdict.grading_id == grading_id))
    session.add_all(
        CheckVerdict(
            grading_id=grading_id,
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


def record_grading_outcome(
    session: Session,
    *,
    submission_id: int,
    lease_token: str,
    outcome: GradingOutcome,
    now: dt.datetime,
) -> bool:
    """Store a finished grading (status, error, result document, benchmark, log, grader
    version) and one `CheckVerdict` row per check. Returns False, writing nothing, if the
    lease is no longer held. The caller commits (or rolls back) everything as one
    transaction."""
    grading_id = session.scalars(
        update(Grading)
        .where(_held_lease(submission_id, lease_token))
        .values(**_outcome_values(outcome, now))
        .returning(Grading.id)
        .execution_options(synchronize_session=False)
    ).first()
    if grading_id is None:
        return False
    _store_check_verdicts(session, grading_id=grading_id, outcome=outcome)
    return True


class FinishedGradingWrite(enum.StrEnum):
    """What `store_finished_grading` did with a finished grading."""

    #: Stored under the lease the worker still held.
    STORED = "stored"
    #: The lease was lost (a database outage outlasted it) but nobody had finished the
    #: grading since: stored, and any later claim of it was fenced out.
    STORED_AFTER_LEASE_LOSS = "stored_after_lease_loss"
    #: The grading was already finished (by another worker, or marked ``error`` by the
    #: lease sweep): nothing written.
    ALREADY_FINISHED = "already_finished"


def store_finished_grading(
    session: Session,
    *,
    grading_id: int,
    submission_id: int,
    lease_token: str,
    attempt: int,
    worker_id: str,
    outcome: GradingOutcome,
    now: dt.datetime,
) -> FinishedGradingWrite:
    """Store a grading a worker finished, exactly once, even after its lease was lost.

    First the ordinary write fenced by the lease token (`record_grading_outcome`). If that
    matches no row, the lease was lost (the database was unreachable for longer than the
    lease, the sweep re-queued the job, perhaps another worker claimed it): the result is
    still stored if the grading is unfinished (``queued`` or ``running``) and has not gone
    back before this worker's claim (``attempts >= attempt``). The write clears
    ``lease_token``, so a worker that re-claimed the grading fails its next renewal, stops
    grading and its result matches no row: the grading is finished once, by the first
    result stored, and a finished grading is never graded again.

    Concurrency: the fence predicates are re-checked under the row lock (PostgreSQL re-reads
    an updated row in READ COMMITTED; SQLite holds the write lock from BEGIN), so of two
    workers storing the same grading, the second matches no row. The caller commits.
    """
    if record_grading_outcome(
        session, submission_id=submission_id, lease_token=lease_token, outcome=outcome, now=now
    ):
        return FinishedGradingWrite.STORED
    unfinished = and_(
        Grading.id == grading_id,
        Grading.submission_id == submission_id,
        Grading.status.in_([SubmissionStatus.QUEUED, SubmissionStatus.RUNNING]),
        Grading.attempts >= attempt,
    )
    stored = session.scalars(
        update(Grading)
        .where(unfinished)
        .values(**_outcome_values(outcome, now), worker_id=worker_id)
        .returning(Grading.id)
        .execution_options(synchronize_session=False)
    ).first()
    if stored is None:
        return FinishedGradingWrite.ALREADY_FINISHED
    _store_check_verdicts(session, grading_id=grading_id, outcome=outcome)
    return FinishedGradingWrite.STORED_AFTER_LEASE_LOSS


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
        update(Grading)
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
        update(Grading)
        .where(_held_lease(submission_id, lease_token))
        .values(
            status=SubmissionStatus.QUEUED,
            attempts=Grading.attempts - 1,
            lease_token=None,
            lease_expires_at=None,
            last_attempt_error="worker shut down during grading",
        )
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1
