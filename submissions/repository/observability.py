"""Aggregates for /healthz and /metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import and_, case, func, literal_column, select, text
from sqlalchemy.orm import Session

from submissions.models import Grading, Submission, SubmissionStatus

__all__ = [
    "DurationHistogram",
    "count_gradings_by_verdict",
    "count_queued_gradings",
    "count_submissions_by_status",
    "grading_duration_histogram",
    "ping",
]


def ping(session: Session) -> None:
    """Round-trip to the database. Raises sqlalchemy.exc.DBAPIError when unreachable."""
    session.execute(text("SELECT 1"))


def count_submissions_by_status(session: Session) -> dict[str, int]:
    """Number of submissions per status of their current grading."""
    rows = session.execute(
        select(Grading.status, func.count())
        .select_from(Submission)
        .join(Grading, and_(Grading.submission_id == Submission.id, Grading.is_current))
        .group_by(Grading.status)
    ).all()
    return {status: count for status, count in rows}


def count_queued_gradings(session: Session) -> int:
    """Gradings waiting for a worker (uploads, regrades and final runs): the queue depth."""
    return session.scalar(
        select(func.count()).select_from(Grading).where(
            Grading.status == SubmissionStatus.QUEUED)
    ) or 0


def count_gradings_by_verdict(session: Session) -> dict[tuple[str, str], int]:
    """Finished gradings per (status, error_kind or ""), e.g. ("error", "infrastructure")."""
    error_kind = func.coalesce(Grading.error_kind, literal_column("''"))
    rows = session.execute(
        select(Grading.status, error_kind, func.count())
        .where(Grading.finished_at.is_not(None))
        .group_by(Grading.status, error_kind)
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
    duration = Grading.grading_duration_s
    columns = [func.sum(case((duration <= bound, 1), else_=0)) for bound in bounds]
    row = session.execute(
        select(func.count(duration), func.coalesce(func.sum(duration), 0.0), *columns).where(
            Grading.finished_at.is_not(None), duration.is_not(None)
        )
    ).one()
    count, total, *cumulative = row
    return DurationHistogram(
        buckets=[(bound, int(n or 0)) for bound, n in zip(bounds, cumulative, strict=True)],
        count=int(count),
        total_s=float(total),
    )
