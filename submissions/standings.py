"""Standings: the leaderboard and each student's score, computed from stored gradings.

Two phases per assignment:

- ``provisional`` (no final run yet): each student's best passing on-time, not disqualified
  submission, ranked by its current grading's headline speedup (higher first; ties: earlier
  first; passes without a GPU benchmark follow, by time).
- ``final`` (a final ranking run exists; the latest decides): the same submissions re-graded
  on the run's secret seed, ranked by that run's headline. A submission that failed there,
  or is still waiting, is listed without a rank and with the reason; a submission
  disqualified since is left out.

Late submissions are never ranked. Scores (submissions/scoring.py): correctness points from
the submission's current grading, speed points from the ranked number.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy.orm import Session

from submissions import assignments, repository
from submissions.models import (
    INFRASTRUCTURE_ERROR,
    TERMINAL_STATUSES,
    Assignment,
    FinalRun,
    Grading,
    SubmissionStatus,
)
from submissions.scoring import Score, score, speed_points

PROVISIONAL, FINAL = "provisional", "final"


@dataclass(frozen=True)
class Standing:
    """One student on the board.

    Attributes:
        rank: 1-based, or None (final phase: failed or pending in the final run).
        headline_speedup: the ranked number (the final run's in the final phase).
        grading_id: the grading that gives the ranked number.
        reason: why there is no rank (None when ranked).
        score: correctness points of the submission + speed points of the ranked number.
    """

    rank: int | None
    student_id: int
    student_name: str
    submission_id: int
    grading_id: int
    headline_speedup: float | None
    device: str | None
    submitted_at: dt.datetime
    reason: str | None
    score: Score


@dataclass(frozen=True)
class Board:
    """The standings of one assignment."""

    assignment: Assignment
    phase: str
    final_run: FinalRun | None
    standings: list[Standing]

    def of_student(self, student_id: int) -> Standing | None:
        """The student's row, or None."""
        return next((s for s in self.standings if s.student_id == student_id), None)


def final_run_reason(grading: Grading) -> str | None:
    """Why a final-run grading gives no rank (None: it passed)."""
    if grading.status not in TERMINAL_STATUSES:
        return "pending: the final ranking run has not graded this submission yet"
    if grading.status == SubmissionStatus.PASSED:
        return None
    if grading.error_kind == INFRASTRUCTURE_ERROR:
        return ("the final ranking run broke on our side (infrastructure error); staff can "
                "start a new final run")
    if grading.status == SubmissionStatus.FAILED:
        return f"failed in the final ranking run: {grading.error_message or 'a check failed'}"
    return (f"error in the final ranking run ({grading.error_kind}): "
            f"{grading.error_message or ''}").rstrip(": ")


def _currently_passing(submission) -> bool:  # noqa: ANN001 - a Submission
    current = submission.current_grading
    return current is not None and current.status == SubmissionStatus.PASSED


def board(session: Session, *, assignment: str, now: dt.datetime) -> Board:
    """The leaderboard of `assignment` (see the module docstring).

    Raises:
        UnknownAssignment: not in the manifest.
    """
    row = assignments.load(session, name=assignment, now=now)
    policy = assignments.points_policy(row)
    run = repository.latest_final_run(session, assignment=assignment)
    if run is None:
        entries = repository.best_passing_submissions(session, assignment=assignment)
        standings = [
            Standing(
                rank=position, student_id=e.student_id, student_name=e.student_name,
                submission_id=e.submission_id, grading_id=e.grading_id,
                headline_speedup=e.headline_speedup, device=e.device,
                submitted_at=e.submitted_at, reason=None,
                score=score(policy, passed=True, headline=e.headline_speedup),
            )
            for position, e in enumerate(entries, start=1)
        ]
        return Board(assignment=row, phase=PROVISIONAL, final_run=None, standings=standings)

    ranked: list[tuple[tuple, Standing]] = []
    unranked: list[Standing] = []
    for grading in repository.final_run_gradings(session, final_run_id=run.id):
        submission = grading.submission
        if submission.disqualified_at is not None:
            continue
        reason = final_run_reason(grading)
        passed = reason is None
        standing = Standing(
            rank=None, student_id=submission.student_id, student_name=submission.student.name,
            submission_id=submission.id, grading_id=grading.id,
            headline_speedup=grading.headline_speedup if passed else None,
            device=grading.device, submitted_at=submission.created_at, reason=reason,
            score=Score(
                correctness=policy.correctness_points if _currently_passing(submission) else 0.0,
                speed=speed_points(policy, grading.headline_speedup) if passed else 0.0),
        )
        if passed:
            key = (grading.headline_speedup is None, -(grading.headline_speedup or 0.0),
                   submission.created_at, submission.id)
            ranked.append((key, standing))
        else:
            unranked.append(standing)
    ranked.sort(key=lambda pair: pair[0])
    standings = [
        Standing(**{**s.__dict__, "rank": position})
        for position, (_key, s) in enumerate(ranked, start=1)
    ]
    unranked.sort(key=lambda s: (s.submitted_at, s.submission_id))
    return Board(assignment=row, phase=FINAL, final_run=run, standings=standings + unranked)
