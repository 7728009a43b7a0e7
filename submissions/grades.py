"""The rules of one assignment as of now, gathered once for a reader: its points policy,
its class-wide due date and every student's extension. Every reader of a grade or of
lateness (the API, the pages, the CLI through the API, the leaderboard, the exports, the
final run) goes through `AssignmentRules`, which calls the one rule of each:
submissions/lateness.py and submissions/scoring.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy.orm import Session

from submissions import assignments, repository
from submissions.lateness import due_in_force, is_late
from submissions.models import (
    TERMINAL_STATUSES,
    Assignment,
    Extension,
    Grading,
    Submission,
    SubmissionStatus,
)
from submissions.repository import SubmissionVerdict
from submissions.scoring import Grade, PointsPolicy, grade


@dataclass(frozen=True)
class AssignmentRules:
    """An assignment's settings row, its points and its extensions (by student id)."""

    assignment: Assignment
    policy: PointsPolicy
    extensions: Mapping[int, Extension]

    def due_for(self, student_id: int) -> dt.datetime | None:
        """The student's due date in force (None: no due date)."""
        return due_in_force(self.assignment.due_at, self.extensions.get(student_id))

    def extension_of(self, student_id: int) -> Extension | None:
        """The student's extension, or None."""
        return self.extensions.get(student_id)

    def is_late(self, *, student_id: int, uploaded_at: dt.datetime) -> bool:
        """Whether an upload by the student at `uploaded_at` is late now."""
        return is_late(uploaded_at, self.due_for(student_id))

    def submission_late(self, submission: Submission) -> bool:
        """Whether `submission` is late under today's dates."""
        return self.is_late(student_id=submission.student_id, uploaded_at=submission.created_at)

    def grade_of(self, submission: Submission, grading: Grading | None = None) -> Grade | None:
        """The grade of `submission` from `grading` (default: its current one); None while
        that grading has no verdict."""
        grading = submission.current_grading if grading is None else grading
        if grading is None or grading.status not in TERMINAL_STATUSES:
            return None
        return grade(self.policy, passed=grading.status == SubmissionStatus.PASSED,
                     headline=grading.headline_speedup,
                     late=self.submission_late(submission),
                     disqualified=submission.disqualified_at is not None)

    def grade_of_verdict(self, verdict: SubmissionVerdict, *, headline: float | None = None,
                         passed: bool | None = None) -> Grade | None:
        """The grade of a submission read by repository.assignment_verdicts; `passed` and
        `headline` override its current grading's (a final run's numbers)."""
        if passed is None:
            if verdict.status not in TERMINAL_STATUSES:
                return None
            passed = verdict.status == SubmissionStatus.PASSED
            headline = verdict.headline_speedup
        return grade(self.policy, passed=passed, headline=headline,
                     late=self.is_late(student_id=verdict.student_id,
                                       uploaded_at=verdict.submitted_at),
                     disqualified=verdict.disqualified)


def rules(session: Session, *, assignment: str, now: dt.datetime,
          student_id: int | None = None) -> AssignmentRules:
    """The rules of `assignment` now (with every extension, or only `student_id`'s).

    Raises:
        UnknownAssignment: not in the manifest.
    """
    row = assignments.load(session, name=assignment, now=now)
    if student_id is None:
        extensions = repository.extensions_of_assignment(session, assignment=row.name)
    else:
        own = repository.get_extension(session, assignment=row.name, student_id=student_id)
        extensions = {} if own is None else {student_id: own}
    return AssignmentRules(assignment=row, policy=assignments.points_policy(row),
                           extensions=extensions)
