"""Students' extensions of due dates (``extensions``)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from submissions.models import Extension

__all__ = ["delete_extension", "extensions_of_assignment", "get_extension", "upsert_extension"]


def extensions_of_assignment(session: Session, *, assignment: str) -> dict[int, Extension]:
    """Every extension of `assignment`, by student id."""
    rows = session.scalars(select(Extension).where(Extension.assignment == assignment))
    return {row.student_id: row for row in rows}


def get_extension(session: Session, *, assignment: str, student_id: int) -> Extension | None:
    """The student's extension of `assignment`, or None."""
    return session.scalars(select(Extension).where(
        Extension.assignment == assignment, Extension.student_id == student_id)).first()


def upsert_extension(session: Session, *, assignment: str, student_id: int,
                     due_at: dt.datetime | None, extra_days: float | None, reason: str,
                     granted_by: str, now: dt.datetime) -> Extension:
    """Set the student's extension of `assignment` (replacing an earlier one)."""
    row = get_extension(session, assignment=assignment, student_id=student_id)
    if row is None:
        row = Extension(assignment=assignment, student_id=student_id)
        session.add(row)
    row.due_at, row.extra_days, row.reason = due_at, extra_days, reason
    row.granted_by, row.granted_at = granted_by, now
    session.flush()
    return row


def delete_extension(session: Session, *, assignment: str, student_id: int) -> bool:
    """Remove the student's extension of `assignment`; False when there was none."""
    result = session.execute(delete(Extension).where(
        Extension.assignment == assignment, Extension.student_id == student_id))
    return bool(result.rowcount)
