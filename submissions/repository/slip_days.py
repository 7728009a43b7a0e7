"""Slip days (``students.slip_days``, ``slip_day_spends``) and the check verdicts that
per-check points read.

Concurrency: every write of a student's spends happens in submissions/slip_days.py after
`lock_student` (PostgreSQL: ``SELECT ... FOR UPDATE`` on the student row; SQLite: the
transaction already holds the write lock), so two derivations of one student never
interleave; the second reads the first's committed spends (READ COMMITTED takes a new
snapshot per statement) and writes the same rows. The unique index on
(student_id, assignment) is the backstop: a second row for one assignment cannot exist.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping

from sqlalchemy import and_, delete, select, update
from sqlalchemy.orm import Session

from submissions.models import CheckVerdict, Grading, SlipDaySpend, Student, Submission
from submissions.scoring import CheckOutcome

__all__ = ["check_outcomes_of_assignment", "replace_slip_day_spends", "set_slip_day_budget",
           "slip_day_spends_of_assignment", "slip_day_spends_of_student"]


def slip_day_spends_of_assignment(session: Session, *, assignment: str,
                                  student_id: int | None = None) -> dict[int, SlipDaySpend]:
    """The spends on `assignment` (of every student, or only `student_id`), by student id."""
    statement = select(SlipDaySpend).where(SlipDaySpend.assignment == assignment)
    if student_id is not None:
        statement = statement.where(SlipDaySpend.student_id == student_id)
    return {row.student_id: row for row in session.scalars(statement)}


def slip_day_spends_of_student(session: Session, *, student_id: int) -> dict[str, SlipDaySpend]:
    """The student's spends, by assignment."""
    rows = session.scalars(select(SlipDaySpend).where(SlipDaySpend.student_id == student_id))
    return {row.assignment: row for row in rows}


def replace_slip_day_spends(session: Session, *, student_id: int,
                            spends: Mapping[str, tuple[int, int]], now: dt.datetime) -> None:
    """Make the student's spends exactly `spends` (assignment -> (submission id, days > 0)):
    rows that match stay untouched (their ``spent_at`` too), others are updated, added or
    deleted. The caller holds the student's row lock."""
    existing = slip_day_spends_of_student(session, student_id=student_id)
    if not existing and not spends:
        return
    for assignment, row in existing.items():
        if assignment not in spends:
            session.execute(delete(SlipDaySpend).where(SlipDaySpend.id == row.id))
    for assignment, (submission_id, days) in spends.items():
        row = existing.get(assignment)
        if row is None:
            session.add(SlipDaySpend(student_id=student_id, assignment=assignment,
                                     submission_id=submission_id, days=days, spent_at=now))
        elif (row.submission_id, row.days) != (submission_id, days):
            row.submission_id, row.days, row.spent_at = submission_id, days, now
    session.flush()
    session.expire_all()


def set_slip_day_budget(session: Session, *, student_id: int, days: int) -> None:
    """Set the student's slip-day budget for the term."""
    session.execute(update(Student).where(Student.id == student_id).values(slip_days=days)
                    .execution_options(synchronize_session=False))
    session.flush()


def check_outcomes_of_assignment(
    session: Session, *, assignment: str, student_id: int | None = None,
    grading_ids: Iterable[int] | None = None,
) -> dict[int, list[CheckOutcome]]:
    """The check verdicts of the current gradings of `assignment`'s submissions (of one
    student, or all), plus those of `grading_ids`, by grading id, in check order."""
    current = (select(Grading.id).join(Submission, Submission.id == Grading.submission_id)
               .where(and_(Grading.is_current, Submission.assignment == assignment)))
    if student_id is not None:
        current = current.where(Submission.student_id == student_id)
    wanted = CheckVerdict.grading_id.in_(current)
    extra = list(grading_ids or ())
    if extra:
        wanted = wanted | CheckVerdict.grading_id.in_(extra)
    rows = session.execute(
        select(CheckVerdict.grading_id, CheckVerdict.name, CheckVerdict.passed,
               CheckVerdict.skipped)
        .where(wanted).order_by(CheckVerdict.grading_id, CheckVerdict.position))
    outcomes: dict[int, list[CheckOutcome]] = {}
    for row in rows:
        outcomes.setdefault(row.grading_id, []).append(
            CheckOutcome(name=row.name, passed=bool(row.passed), ran=not row.skipped))
    return outcomes
