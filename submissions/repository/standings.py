"""The query behind the leaderboard, the grade exports and the final run: every submission
of one assignment with its current grading's verdict, read once. Which one ranks, and
whether it is late, is decided in Python by the one rule of each (submissions/standings.py,
submissions/lateness.py), never in SQL."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from submissions.models import Grading, Student, Submission

__all__ = ["SubmissionVerdict", "assignment_verdicts"]


@dataclass(frozen=True)
class SubmissionVerdict:
    """One submission of an assignment and its current grading (None fields: no grading).

    Attributes:
        status: the current grading's status (``queued`` ... ``error``), None without one.
        headline_speedup: the current grading's headline (None: no GPU benchmark).
    """

    student_id: int
    student_name: str
    submission_id: int
    submitted_at: dt.datetime
    disqualified_reason: str | None
    disqualified: bool
    grading_id: int | None
    status: str | None
    headline_speedup: float | None
    device: str | None


def assignment_verdicts(session: Session, *, assignment: str,
                        student_id: int | None = None) -> list[SubmissionVerdict]:
    """Every submission of `assignment` (of every student, or only `student_id`), ordered
    by upload time then id."""
    statement = (
        select(Submission.id, Submission.student_id, Submission.created_at,
               Submission.disqualified_at, Submission.disqualified_reason, Student.name,
               Grading.id.label("grading_id"), Grading.status, Grading.headline_speedup,
               Grading.device)
        .join(Student, Student.id == Submission.student_id)
        .outerjoin(Grading, and_(Grading.submission_id == Submission.id, Grading.is_current))
        .where(Submission.assignment == assignment)
        .order_by(Submission.created_at, Submission.id)
    )
    if student_id is not None:
        statement = statement.where(Submission.student_id == student_id)
    rows = session.execute(statement).all()
    return [
        SubmissionVerdict(
            student_id=row.student_id, student_name=row.name, submission_id=row.id,
            submitted_at=row.created_at, disqualified=row.disqualified_at is not None,
            disqualified_reason=row.disqualified_reason, grading_id=row.grading_id,
            status=row.status, headline_speedup=row.headline_speedup, device=row.device)
        for row in rows
    ]
