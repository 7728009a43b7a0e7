"""The rules of one assignment as of now, gathered once for a reader: its points policy
(per-check points included), its late policy and curve, its class-wide due date, every
student's extension and slip-day spend, and the check verdicts of the current gradings.
Every reader of a grade or of lateness (the API, the pages, the CLI through the API, the
leaderboard, the exports, the final run, the slip-day derivation) goes through
`AssignmentRules`, which calls the one rule of each: submissions/lateness.py and
submissions/scoring.py. Which submission counts (best or latest) is chosen here too
(`choose_counted`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from submissions import assignments, repository
from submissions.lateness import LateCharge, LateCurve, due_in_force, is_late, late_charge
from submissions.models import (
    TERMINAL_STATUSES,
    Assignment,
    Counting,
    Extension,
    Grading,
    LatePolicy,
    SlipDaySpend,
    Submission,
    SubmissionStatus,
)
from submissions.repository import SubmissionVerdict
from submissions.scoring import CheckOutcome, Grade, PointsPolicy, grade


@dataclass(frozen=True)
class AssignmentRules:
    """An assignment's settings row, its points, its late curve, its extensions and slip-day
    spends (by student id) and the check verdicts of its current gradings (by grading id)."""

    assignment: Assignment
    policy: PointsPolicy
    extensions: Mapping[int, Extension]
    curve: LateCurve | None = None
    spends: Mapping[int, SlipDaySpend] | None = None
    check_outcomes: Mapping[int, Sequence[CheckOutcome]] | None = None

    def due_for(self, student_id: int) -> dt.datetime | None:
        """The student's due date in force (None: no due date)."""
        return due_in_force(self.assignment.due_at, self.extensions.get(student_id))

    def extension_of(self, student_id: int) -> Extension | None:
        """The student's extension, or None."""
        return self.extensions.get(student_id)

    def is_late(self, *, student_id: int, uploaded_at: dt.datetime) -> bool:
        """Whether an upload by the student at `uploaded_at` is after their due date in
        force (before any slip day)."""
        return is_late(uploaded_at, self.due_for(student_id))

    def slip_days_on(self, *, student_id: int, submission_id: int) -> int:
        """The slip days the student spent on that submission (0: none)."""
        spend = (self.spends or {}).get(student_id)
        return spend.days if spend is not None and spend.submission_id == submission_id else 0

    def charge(self, *, student_id: int, submission_id: int, uploaded_at: dt.datetime,
               slip_days: int | None = None) -> LateCharge:
        """How late that submission is and what it owes (`slip_days`: as if that many were
        spent on it; default: the stored spend)."""
        if slip_days is None:
            slip_days = self.slip_days_on(student_id=student_id, submission_id=submission_id)
        return late_charge(uploaded_at, self.due_for(student_id), curve=self.curve,
                           slip_days=slip_days)

    def submission_late(self, submission: Submission) -> bool:
        """Whether `submission` is late under today's dates, after its slip days."""
        return self.charge(student_id=submission.student_id, submission_id=submission.id,
                           uploaded_at=submission.created_at).late

    def verdict_late(self, verdict: SubmissionVerdict) -> bool:
        """`submission_late` of a submission read by repository.assignment_verdicts."""
        return self.charge(student_id=verdict.student_id, submission_id=verdict.submission_id,
                           uploaded_at=verdict.submitted_at).late

    def _grade(self, *, charge: LateCharge, passed: bool, headline: float | None,
               disqualified: bool, checks: Sequence[CheckOutcome] | None) -> Grade:
        withheld_late = charge.late and (
            self.assignment.late_policy != LatePolicy.PENALTY or self.curve is None
            or charge.past_cap)
        return grade(self.policy, passed=passed, headline=headline, late=withheld_late,
                     disqualified=disqualified,
                     charge=charge if charge.late_by.total_seconds() > 0 else None,
                     checks=checks)

    def grade_of(self, submission: Submission, grading: Grading | None = None) -> Grade | None:
        """The grade of `submission` from `grading` (default: its current one); None while
        that grading has no verdict."""
        grading = submission.current_grading if grading is None else grading
        if grading is None or grading.status not in TERMINAL_STATUSES:
            return None
        checks = [CheckOutcome(name=c.name, passed=c.passed, ran=not c.skipped)
                  for c in grading.checks]
        return self._grade(
            charge=self.charge(student_id=submission.student_id, submission_id=submission.id,
                               uploaded_at=submission.created_at),
            passed=grading.status == SubmissionStatus.PASSED,
            headline=grading.headline_speedup,
            disqualified=submission.disqualified_at is not None, checks=checks)

    def grade_of_verdict(self, verdict: SubmissionVerdict, *, headline: float | None = None,
                         passed: bool | None = None,
                         slip_days: int | None = None) -> Grade | None:
        """The grade of a submission read by repository.assignment_verdicts; `passed` and
        `headline` override its current grading's (a final run's numbers); `slip_days`
        as if that many were spent on it (default: the stored spend)."""
        if passed is None:
            if verdict.status not in TERMINAL_STATUSES:
                return None
            passed = verdict.status == SubmissionStatus.PASSED
            headline = verdict.headline_speedup
        checks = (self.check_outcomes or {}).get(verdict.grading_id or -1, [])
        return self._grade(
            charge=self.charge(student_id=verdict.student_id,
                               submission_id=verdict.submission_id,
                               uploaded_at=verdict.submitted_at, slip_days=slip_days),
            passed=passed, headline=headline, disqualified=verdict.disqualified,
            checks=checks)

    def choose_counted(self, verdicts: Sequence[SubmissionVerdict],
                       grade_for: Callable[[SubmissionVerdict], Grade | None] | None = None,
                       *, prefer: int | None = None) -> SubmissionVerdict | None:
        """The student's submission that counts among `verdicts` (one student's, in upload
        order): ``latest``: the last upload, graded or not; ``best``: the graded one with
        the highest grade (ties: the higher score before any late rule, then `prefer`, then
        the earlier upload). `grade_for` grades one (default: `grade_of_verdict`)."""
        if not verdicts:
            return None
        if self.assignment.counting == Counting.LATEST:
            return verdicts[-1]
        grade_for = grade_for or self.grade_of_verdict
        best: tuple[tuple, SubmissionVerdict] | None = None
        for position, verdict in enumerate(verdicts):
            value = grade_for(verdict)
            if value is None:
                continue
            key = (value.total, value.earned.total, verdict.submission_id == prefer, -position)
            if best is None or key > best[0]:
                best = (key, verdict)
        return best[1] if best is not None else None


def rules(session: Session, *, assignment: str, now: dt.datetime,
          student_id: int | None = None) -> AssignmentRules:
    """The rules of `assignment` now (with every extension and spend, or only `student_id`'s).

    Raises:
        UnknownAssignment: not in the manifest.
    """
    row = assignments.load(session, name=assignment, now=now)
    if student_id is None:
        extensions = repository.extensions_of_assignment(session, assignment=row.name)
    else:
        own = repository.get_extension(session, assignment=row.name, student_id=student_id)
        extensions = {} if own is None else {student_id: own}
    policy = assignments.points_policy(row)
    return AssignmentRules(
        assignment=row, policy=policy, extensions=extensions,
        curve=assignments.late_curve(row),
        spends=repository.slip_day_spends_of_assignment(session, assignment=row.name,
                                                        student_id=student_id),
        check_outcomes=repository.check_outcomes_of_assignment(
            session, assignment=row.name, student_id=student_id)
        if policy.check_points else {})
