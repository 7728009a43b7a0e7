"""Slip days (docs/course.md, "Slip days"): a per-student budget of whole days for the term,
spent automatically on the submission that counts of a late assignment, each day covering 24 h
of its lateness (submissions/lateness.py).

What is spent is derived, never accumulated: `rederive` recomputes every spend of one
student from their submissions, the due dates in force and their budget, and rewrites the
``slip_day_spends`` rows to match. It runs under the student's row lock
(repository.lock_student) after each upload, each stored grading, a regrade applied, a change
of an assignment's dates or policy, an extension granted or revoked and a budget change; so
two concurrent uploads spend once, and a second derivation of the same state writes nothing.

Order of spending: assignments by their class-wide due date (earliest first; those without
one last), so a student's earlier assignment never loses days to a later one. Per assignment
the submission that counts is chosen (submissions/grades.py ``choose_counted``) with every
candidate graded as if it had the days it needs (at most the days left); days are spent only
where they change what it earns (or while its grading is pending: they are re-derived when
it finishes).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy.orm import Session

from grader.manifest import MANIFESTS
from submissions import assignments, audit, grades, repository
from submissions.errors import SlipDaysInvalid, StudentNotFound
from submissions.lateness import late_by, slip_days_to_cover

#: The most slip days staff may give one student.
MAX_BUDGET = 365


@dataclass(frozen=True)
class SlipDayAccount:
    """One student's slip days: the budget, what is spent (assignment -> (submission id,
    days)) and what is left."""

    budget: int
    spent: dict[str, tuple[int, int]]

    @property
    def used(self) -> int:
        """Days spent over every assignment."""
        return sum(days for _submission, days in self.spent.values())

    @property
    def left(self) -> int:
        """Days still to spend."""
        return max(0, self.budget - self.used)


def account(session: Session, *, student_id: int) -> SlipDayAccount:
    """The student's slip days as stored (the last derivation).

    Raises:
        StudentNotFound: no such student.
    """
    student = repository.get_student(session, student_id=student_id)
    if student is None:
        raise StudentNotFound(f"no student {student_id}")
    spends = repository.slip_day_spends_of_student(session, student_id=student_id)
    return SlipDayAccount(budget=student.slip_days or 0,
                          spent={a: (row.submission_id, row.days) for a, row in spends.items()})


def left_for(session: Session, *, student_id: int, assignment: str) -> int:
    """The slip days the student could spend on `assignment` now: what is left plus what
    is already spent on it (a new submission that counts takes those over)."""
    held = account(session, student_id=student_id)
    return held.left + held.spent.get(assignment, (0, 0))[1]


def _due_order(session: Session, now: dt.datetime) -> list[str]:
    rows = [assignments.load(session, name=name, now=now) for name in MANIFESTS]
    far = dt.datetime.max.replace(tzinfo=dt.UTC)
    return [row.name for row in sorted(rows, key=lambda r: (r.due_at or far, r.name))]


def rederive(session: Session, *, student_id: int, now: dt.datetime) -> SlipDayAccount:
    """Recompute and store the student's spends (module docstring); flushes, never commits.

    Raises:
        StudentNotFound: no such student.
    """
    repository.lock_student(session, student_id=student_id)
    student = repository.get_student(session, student_id=student_id)
    if student is None:
        raise StudentNotFound(f"no student {student_id}")
    left = student.slip_days or 0
    spent: dict[str, tuple[int, int]] = {}
    if left <= 0:  # the common case (no slip days): nothing to derive, any old spend goes
        repository.replace_slip_day_spends(session, student_id=student_id, spends={}, now=now)
        return SlipDayAccount(budget=0, spent={})
    for name in _due_order(session, now):
        if left <= 0:
            break
        verdicts = repository.assignment_verdicts(session, assignment=name, student_id=student_id)
        if not verdicts:
            continue
        rules = grades.rules(session, assignment=name, now=now, student_id=student_id)
        due = rules.due_for(student_id)
        budget = left

        def needed(verdict: repository.SubmissionVerdict, due=due, budget=budget) -> int:
            return min(budget, slip_days_to_cover(late_by(verdict.submitted_at, due)))

        counted = rules.choose_counted(
            verdicts, lambda v, rules=rules, needed=needed: rules.grade_of_verdict(
                v, slip_days=needed(v)))
        if counted is None:
            continue
        days = needed(counted)
        if days == 0:
            continue
        with_days = rules.grade_of_verdict(counted, slip_days=days)
        without = rules.grade_of_verdict(counted, slip_days=0)
        if with_days is not None and without is not None and \
                (with_days.total, with_days.withheld) == (without.total, without.withheld):
            continue  # nothing to gain (it earned nothing, or was disqualified)
        spent[name] = (counted.submission_id, days)
        left -= days
    repository.replace_slip_day_spends(session, student_id=student_id, spends=spent, now=now)
    return SlipDayAccount(budget=student.slip_days or 0, spent=spent)


def rederive_all(session: Session, *, now: dt.datetime) -> None:
    """`rederive` for every student (after a change of an assignment's dates or policy)."""
    for student in repository.list_students(session):
        rederive(session, student_id=student.id, now=now)


def set_budget(session: Session, *, student_id: int, days: int, reason: str,
               actor: audit.Actor, now: dt.datetime) -> SlipDayAccount:
    """Set the student's slip-day budget for the term (audited with the old and new budget
    and the reason) and re-derive their spends.

    Raises:
        StudentNotFound: no such student.
        SlipDaysInvalid: `days` outside 0..MAX_BUDGET, or an empty reason.
    """
    if not 0 <= days <= MAX_BUDGET:
        raise SlipDaysInvalid(f"a slip-day budget is 0 to {MAX_BUDGET} days, got {days}")
    if not reason.strip():
        raise SlipDaysInvalid("say why the budget changes (reason)")
    repository.lock_student(session, student_id=student_id)
    before = account(session, student_id=student_id)
    repository.set_slip_day_budget(session, student_id=student_id, days=days)
    session.expire_all()
    after = rederive(session, student_id=student_id, now=now)
    audit.record(session, actor=actor, action="student.slip_days", now=now,
                 target_type="student", target_id=student_id,
                 details={"before": before.budget, "after": days, "reason": reason.strip(),
                          "used": after.used})
    return after
