"""The query behind the staff's class analytics (submissions/analytics.py): the check
verdicts of every submission's current, finished grading of one assignment."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from submissions.models import TERMINAL_STATUSES, CheckVerdict, Grading, Submission

__all__ = ["CheckVerdictRow", "current_check_verdicts"]


@dataclass(frozen=True)
class CheckVerdictRow:
    """One check of one submission's current grading, with when the submission was uploaded."""

    submission_id: int
    uploaded_at: dt.datetime
    position: int
    name: str
    passed: bool
    skipped: bool
    message: str | None
    numbers: dict[str, Any] | None
    student_id: int = 0  # last, with a default: rows built positionally keep their meaning


def current_check_verdicts(session: Session, *, assignment: str) -> list[CheckVerdictRow]:
    """Every check verdict of the current grading of each submission of `assignment` whose
    grading has finished (passed, failed or error; disqualified and late ones included: the
    analytics are about what the class's code does), oldest upload first, then by check
    position."""
    rows = session.execute(
        select(Submission.id, Submission.created_at, CheckVerdict.position, CheckVerdict.name,
               CheckVerdict.passed, CheckVerdict.skipped, CheckVerdict.message, CheckVerdict.numbers,
               Submission.student_id)
        .join(Grading, Grading.submission_id == Submission.id)
        .join(CheckVerdict, CheckVerdict.grading_id == Grading.id)
        .where(Submission.assignment == assignment, Grading.is_current.is_(True),
               Grading.status.in_([str(s) for s in TERMINAL_STATUSES]))
        .order_by(Submission.created_at, Submission.id, CheckVerdict.position)
    ).all()
    return [CheckVerdictRow(*row) for row in rows]
