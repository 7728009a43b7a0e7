"""Similarity review: known sources, review runs (a job queue of their own) and the pairs
they found.

Concurrency of the run queue (the same protocol as the gradings' queue, queue.py): a run is
claimed by one UPDATE from ``queued`` to ``running`` stamping a random ``lease_token``; on
PostgreSQL the row is picked by a sub-select ``FOR UPDATE SKIP LOCKED`` (concurrent workers
lock different rows and the outer ``status = 'queued'`` predicate is evaluated under the row
lock), on SQLite the transaction holds the write lock from ``BEGIN IMMEDIATE``. Storing the
outcome is conditional on ``status = 'running' AND lease_token = :token``: a worker whose
lease expired (and whose run was re-queued, perhaps claimed again) stores nothing, so a run's
pairs are written exactly once. Expired leases are swept before a claim: back to ``queued``,
or ``error`` once ``max_attempts`` claims were used.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import and_, case, delete, func, or_, select, update
from sqlalchemy.orm import Session, selectinload

from submissions.models import (
    SimilarityPair,
    SimilarityRun,
    SimilaritySource,
    SimilaritySourceKind,
    SimilarityStatus,
    Submission,
)

__all__ = [
    "ClaimedSimilarityRun",
    "PairRow",
    "claim_next_similarity_run",
    "compared_similarity_sources",
    "count_similarity_pairs",
    "delete_similarity_source",
    "fail_similarity_run",
    "get_similarity_pair",
    "get_similarity_run",
    "get_similarity_source",
    "insert_similarity_run",
    "insert_similarity_source",
    "latest_similarity_run",
    "list_similarity_pairs",
    "list_similarity_runs",
    "list_similarity_sources",
    "previous_similarity_reviews",
    "release_similarity_run",
    "set_similarity_review",
    "store_similarity_outcome",
    "submissions_to_review",
    "unfinished_similarity_run",
    "upsert_reference_source",
]


# ------------------------------------------------------------------------------ sources


def list_similarity_sources(session: Session, *, assignment: str) -> Sequence[SimilaritySource]:
    """The known sources of `assignment`: the reference, the public ones by name, then the
    retired references."""
    rank = case({SimilaritySourceKind.REFERENCE.value: 0, SimilaritySourceKind.PUBLIC.value: 1},
                value=SimilaritySource.kind, else_=2)
    return session.scalars(
        select(SimilaritySource).where(SimilaritySource.assignment == assignment)
        .order_by(rank, SimilaritySource.name, SimilaritySource.id)
    ).all()


def get_similarity_source(session: Session, *, source_id: int) -> SimilaritySource | None:
    """The source, or None."""
    return session.get(SimilaritySource, source_id)


def insert_similarity_source(session: Session, *, assignment: str, kind: str, name: str,
                             origin: str | None, source_text: str, source_sha256: str,
                             added_by: str, now: dt.datetime) -> SimilaritySource:
    """Insert a source; flushes. The unique index on (assignment, name) refuses a second
    source of the same name (IntegrityError: the caller checks first)."""
    source = SimilaritySource(assignment=assignment, kind=kind, name=name, origin=origin,
                              source_text=source_text, source_sha256=source_sha256,
                              added_by=added_by, added_at=now)
    session.add(source)
    session.flush()
    return source


def upsert_reference_source(session: Session, *, assignment: str, name: str, source_text: str,
                            source_sha256: str, added_by: str, now: dt.datetime
                            ) -> SimilaritySource:
    """The assignment's reference as a source: inserted the first time; when the grader's
    reference changed, the old row is retired (renamed with the date, kind ``retired``: the
    pairs of earlier reviews keep the text their fragments point into) and a new one
    inserted."""
    row = session.scalars(
        select(SimilaritySource).where(SimilaritySource.assignment == assignment,
                                       SimilaritySource.kind == SimilaritySourceKind.REFERENCE)
    ).first()
    if row is not None and row.source_sha256 == source_sha256:
        return row
    if row is not None:
        row.kind = SimilaritySourceKind.RETIRED
        row.name = f"{row.name[:140]}, until {now:%Y-%m-%d %H:%M:%S} UTC (#{row.id})"
        session.flush()
    return insert_similarity_source(session, assignment=assignment,
                                    kind=SimilaritySourceKind.REFERENCE, name=name,
                                    origin="grader/assignments (the course's reference)",
                                    source_text=source_text, source_sha256=source_sha256,
                                    added_by=added_by, now=now)


def compared_similarity_sources(session: Session, *, assignment: str
                                ) -> Sequence[SimilaritySource]:
    """The sources a review of `assignment` compares with: the reference and the public
    ones (not the retired)."""
    return [s for s in list_similarity_sources(session, assignment=assignment)
            if s.kind != SimilaritySourceKind.RETIRED]


def delete_similarity_source(session: Session, *, source_id: int) -> None:
    """Delete a source (its pairs go with it: ON DELETE CASCADE)."""
    session.execute(delete(SimilarityPair).where(SimilarityPair.right_source_id == source_id))
    session.execute(delete(SimilaritySource).where(SimilaritySource.id == source_id))


# ------------------------------------------------------------------------- submissions


def submissions_to_review(session: Session, *, assignment: str,
                          counted_ids: Collection[int]) -> Sequence[Submission]:
    """The submission of each student of `assignment` that a review compares, in student id
    order: the student's one among `counted_ids` (the submission that counts for their grade,
    chosen by the service's one rule: submissions/standings.py ``counted_submissions``); for
    a student none of whose submissions is among them (nothing counted yet), their latest
    upload (by upload time, then id)."""
    counted = list(counted_ids)
    ranked = (
        select(Submission.id, Submission.student_id,
               func.row_number().over(partition_by=Submission.student_id,
                                      order_by=(Submission.created_at.desc(),
                                                Submission.id.desc())).label("rank"))
        .where(Submission.assignment == assignment)
        .subquery()
    )
    students_counted = select(Submission.student_id).where(Submission.id.in_(counted))
    latest_of_the_rest = select(ranked.c.id).where(
        ranked.c.rank == 1, ranked.c.student_id.not_in(students_counted))
    return session.scalars(
        select(Submission)
        .where(Submission.assignment == assignment,
               or_(Submission.id.in_(counted), Submission.id.in_(latest_of_the_rest)))
        .options(selectinload(Submission.student))
        .order_by(Submission.student_id)
    ).all()


# ---------------------------------------------------------------------------- the runs


def insert_similarity_run(session: Session, *, assignment: str, threshold: float,
                          requested_by: str, now: dt.datetime) -> SimilarityRun:
    """Queue a review run; flushes."""
    run = SimilarityRun(assignment=assignment, status=SimilarityStatus.QUEUED,
                        threshold=threshold, requested_by=requested_by, created_at=now,
                        attempts=0)
    session.add(run)
    session.flush()
    return run


def unfinished_similarity_run(session: Session, *, assignment: str) -> SimilarityRun | None:
    """A queued or running run of `assignment`, or None."""
    return session.scalars(
        select(SimilarityRun).where(
            SimilarityRun.assignment == assignment,
            SimilarityRun.status.in_((SimilarityStatus.QUEUED, SimilarityStatus.RUNNING)))
        .order_by(SimilarityRun.id.desc()).limit(1)
    ).first()


def get_similarity_run(session: Session, *, run_id: int) -> SimilarityRun | None:
    """The run, or None."""
    return session.get(SimilarityRun, run_id)


def latest_similarity_run(session: Session, *, assignment: str,
                          finished: bool = False) -> SimilarityRun | None:
    """The newest run of `assignment` (with `finished`: the newest finished one), or None."""
    query = select(SimilarityRun).where(SimilarityRun.assignment == assignment)
    if finished:
        query = query.where(SimilarityRun.status == SimilarityStatus.FINISHED)
    return session.scalars(query.order_by(SimilarityRun.id.desc()).limit(1)).first()


def list_similarity_runs(session: Session, *, assignment: str, limit: int = 20
                         ) -> Sequence[SimilarityRun]:
    """The runs of `assignment`, newest first."""
    return session.scalars(
        select(SimilarityRun).where(SimilarityRun.assignment == assignment)
        .order_by(SimilarityRun.id.desc()).limit(limit)
    ).all()


@dataclass(frozen=True)
class ClaimedSimilarityRun:
    """What a worker needs to run one claimed review."""

    run_id: int
    assignment: str
    threshold: float
    lease_token: str
    attempt: int


def claim_next_similarity_run(session: Session, *, worker_id: str, lease_s: float,
                              max_attempts: int, now: dt.datetime
                              ) -> ClaimedSimilarityRun | None:
    """Sweep expired leases, then atomically claim the oldest queued run (module docstring:
    why exactly one worker gets it), or return None."""
    expired = and_(SimilarityRun.status == SimilarityStatus.RUNNING,
                   SimilarityRun.lease_expires_at < now)
    session.execute(
        update(SimilarityRun).where(expired, SimilarityRun.attempts >= max_attempts)
        .values(status=SimilarityStatus.ERROR, lease_token=None, finished_at=now,
                error_message="the review's lease expired too often (its worker stopped)")
        .execution_options(synchronize_session=False))
    session.execute(
        update(SimilarityRun).where(expired)
        .values(status=SimilarityStatus.QUEUED, lease_token=None, worker_id=None)
        .execution_options(synchronize_session=False))
    next_queued = (
        select(SimilarityRun.id).where(SimilarityRun.status == SimilarityStatus.QUEUED)
        .order_by(SimilarityRun.created_at, SimilarityRun.id).limit(1)
        .with_for_update(skip_locked=True).scalar_subquery()
    )
    token = secrets.token_hex(16)
    claimed = session.execute(
        update(SimilarityRun)
        .where(SimilarityRun.id == next_queued, SimilarityRun.status == SimilarityStatus.QUEUED)
        .values(status=SimilarityStatus.RUNNING, attempts=SimilarityRun.attempts + 1,
                worker_id=worker_id, lease_token=token, started_at=now,
                lease_expires_at=now + dt.timedelta(seconds=lease_s))
        .returning(SimilarityRun.id, SimilarityRun.assignment, SimilarityRun.threshold,
                   SimilarityRun.attempts)
        .execution_options(synchronize_session=False)
    ).first()
    if claimed is None:
        return None
    return ClaimedSimilarityRun(run_id=claimed.id, assignment=claimed.assignment,
                                threshold=claimed.threshold, lease_token=token,
                                attempt=claimed.attempts)


def _held(run_id: int, lease_token: str) -> object:
    return and_(SimilarityRun.id == run_id, SimilarityRun.status == SimilarityStatus.RUNNING,
                SimilarityRun.lease_token == lease_token)


@dataclass(frozen=True)
class PairRow:
    """One pair to store (the service builds it from the engine's findings)."""

    left_submission_id: int
    right_submission_id: int | None
    right_source_id: int | None
    similarity: float
    left_similarity: float
    right_similarity: float
    matched_chars: int
    left_fragments: list[list[int]]
    right_fragments: list[list[int]]
    reviewed_at: dt.datetime | None = None
    reviewed_by: str | None = None
    review_note: str | None = None


def store_similarity_outcome(session: Session, *, run_id: int, lease_token: str,
                             pairs: Sequence[PairRow], tool: str, parameters: dict,
                             submissions_compared: int, sources_compared: int,
                             pairs_compared: int, duration_s: float, now: dt.datetime) -> bool:
    """Finish a run with its pairs, fenced by the lease token. Returns False (and writes
    nothing) when the lease is no longer held."""
    done = session.execute(
        update(SimilarityRun).where(_held(run_id, lease_token))
        .values(status=SimilarityStatus.FINISHED, lease_token=None, finished_at=now, tool=tool,
                parameters=parameters, submissions_compared=submissions_compared,
                sources_compared=sources_compared, pairs_compared=pairs_compared,
                duration_s=duration_s)
        .execution_options(synchronize_session=False))
    if done.rowcount != 1:
        return False
    session.add_all(SimilarityPair(run_id=run_id, **vars(p)) for p in pairs)
    session.flush()
    return True


def release_similarity_run(session: Session, *, run_id: int, lease_token: str) -> bool:
    """Hand a claimed run back to the queue without charging the claim (the worker is
    stopping), fenced by the lease token."""
    done = session.execute(
        update(SimilarityRun).where(_held(run_id, lease_token))
        .values(status=SimilarityStatus.QUEUED, lease_token=None, worker_id=None,
                attempts=SimilarityRun.attempts - 1)
        .execution_options(synchronize_session=False))
    return done.rowcount == 1


def fail_similarity_run(session: Session, *, run_id: int, lease_token: str, message: str,
                        now: dt.datetime) -> bool:
    """Mark a claimed run ``error`` with `message`, fenced by the lease token."""
    done = session.execute(
        update(SimilarityRun).where(_held(run_id, lease_token))
        .values(status=SimilarityStatus.ERROR, lease_token=None, finished_at=now,
                error_message=message)
        .execution_options(synchronize_session=False))
    return done.rowcount == 1


# ---------------------------------------------------------------------------- the pairs


def count_similarity_pairs(session: Session, *, run_id: int, min_similarity: float = 0.0) -> int:
    """How many pairs of a run are at or above `min_similarity`."""
    return session.scalar(
        select(func.count()).select_from(SimilarityPair)
        .where(SimilarityPair.run_id == run_id, SimilarityPair.similarity >= min_similarity)) or 0


def list_similarity_pairs(session: Session, *, run_id: int, min_similarity: float = 0.0,
                          limit: int | None = None, offset: int = 0) -> Sequence[SimilarityPair]:
    """The pairs of a run at or above `min_similarity`, most similar first (then by id: a
    stable order for paging), with both submissions, their students, the source and the run
    loaded."""
    return session.scalars(
        select(SimilarityPair)
        .where(SimilarityPair.run_id == run_id, SimilarityPair.similarity >= min_similarity)
        .options(selectinload(SimilarityPair.left).selectinload(Submission.student),
                 selectinload(SimilarityPair.right).selectinload(Submission.student),
                 selectinload(SimilarityPair.source), selectinload(SimilarityPair.run))
        .order_by(SimilarityPair.similarity.desc(), SimilarityPair.id)
        .limit(limit).offset(offset)
    ).all()


def get_similarity_pair(session: Session, *, pair_id: int) -> SimilarityPair | None:
    """The pair with both sides and its run loaded, or None."""
    return session.scalars(
        select(SimilarityPair).where(SimilarityPair.id == pair_id)
        .options(selectinload(SimilarityPair.left).selectinload(Submission.student),
                 selectinload(SimilarityPair.right).selectinload(Submission.student),
                 selectinload(SimilarityPair.source), selectinload(SimilarityPair.run))
    ).first()


def set_similarity_review(session: Session, *, pair_id: int, at: dt.datetime | None,
                          by: str | None, note: str | None) -> None:
    """Set (or clear, with None) a pair's review mark."""
    session.execute(update(SimilarityPair).where(SimilarityPair.id == pair_id)
                    .values(reviewed_at=at, reviewed_by=by, review_note=note)
                    .execution_options(synchronize_session=False))


def previous_similarity_reviews(session: Session, *, assignment: str
                                ) -> dict[tuple[int, int | None, int | None], SimilarityPair]:
    """The newest reviewed pair of earlier runs of `assignment` per (left submission, right
    submission, right source): a new run carries their marks over (the same two texts)."""
    rows = session.scalars(
        select(SimilarityPair).join(SimilarityRun, SimilarityRun.id == SimilarityPair.run_id)
        .where(SimilarityRun.assignment == assignment, SimilarityPair.reviewed_at.is_not(None))
        .order_by(SimilarityPair.id)
    ).all()
    return {(p.left_submission_id, p.right_submission_id, p.right_source_id): p for p in rows}
