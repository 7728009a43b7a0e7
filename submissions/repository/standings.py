"""The queries behind the leaderboard and the grade exports: queries over stored gradings,
never a recomputation."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session

from submissions.models import Grading, Student, Submission, SubmissionStatus

__all__ = ["LeaderboardEntry", "SubmissionCounts", "best_passing_submissions",
           "leaderboard_entries", "submission_counts"]


@dataclass(frozen=True)
class LeaderboardEntry:
    """One student's best passing submission (by its current grading)."""

    student_id: int
    student_name: str
    submission_id: int
    grading_id: int
    headline_speedup: float | None
    submitted_at: dt.datetime
    device: str | None


def best_passing_submissions(
    session: Session, *, assignment: str, late: bool = False
) -> list[LeaderboardEntry]:
    """Each student's best passing submission of `assignment` among those uploaded on time
    (``late=False``) or late (``late=True``), never a disqualified one; best first: by the
    headline speedup of the current grading (higher first; ties: earlier submission first),
    then students whose passing submissions have no GPU benchmark, by submission time."""

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
            Submission.created_at,
            Grading.id.label("grading_id"),
            Grading.headline_speedup,
            Grading.device,
            func.row_number()
            .over(
                partition_by=Submission.student_id,
                order_by=(
                    case((Grading.headline_speedup.is_(None), 1), else_=0),
                    Grading.headline_speedup.desc(),
                    Submission.created_at,
                    Submission.id,
                ),
            )
            .label("position_for_student"),
        )
        .join(Grading, and_(Grading.submission_id == Submission.id, Grading.is_current))
        .where(
            Grading.status == SubmissionStatus.PASSED,
            Submission.assignment == assignment,
            Submission.is_late.is_(late),
            Submission.disqualified_at.is_(None),
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
            grading_id=row.grading_id,
            headline_speedup=row.headline_speedup,
            submitted_at=row.created_at,
            device=row.device,
        )
        for row in rows
    ]


def leaderboard_entries(session: Session, *, assignment: str) -> list[LeaderboardEntry]:
    """The provisional ranking: `best_passing_submissions` of the on-time submissions."""
    return best_passing_submissions(session, assignment=assignment, late=False)


@dataclass(frozen=True)
class SubmissionCounts:
    """How many submissions of one assignment a student has, and how many of them are late
    or disqualified."""

    total: int
    late: int
    disqualified: int


def submission_counts(session: Session, *, assignment: str) -> dict[int, SubmissionCounts]:
    """`SubmissionCounts` per student id (students without a submission are absent)."""
    rows = session.execute(
        select(
            Submission.student_id,
            func.count(Submission.id),
            func.sum(case((Submission.is_late, 1), else_=0)),
            func.sum(case((Submission.disqualified_at.is_not(None), 1), else_=0)),
        )
        .where(Submission.assignment == assignment)
        .group_by(Submission.student_id)
    ).all()
    return {
        student_id: SubmissionCounts(total=int(total), late=int(late or 0),
                                     disqualified=int(disqualified or 0))
        for student_id, total, late, disqualified in rows
    }
