"""Disqualifying and restoring submissions (staff). A disqualified submission keeps its
gradings but is hidden from rankings, final runs and scores; its owner sees that it was
disqualified, and why."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from submissions import audit, repository
from submissions.errors import AlreadyDisqualified, NotDisqualified, SubmissionNotFound
from submissions.models import Submission

MAX_REASON_CHARS = 2000


def disqualify(
    session: Session, *, submission_id: int, reason: str, actor: audit.Actor, now: dt.datetime
) -> Submission:
    """Disqualify a submission with a reason the student will read; audited.

    Raises:
        SubmissionNotFound: no such submission.
        AlreadyDisqualified: it already is (restore it first to change the reason).
    """
    submission = _get(session, submission_id)
    if submission.disqualified_at is not None:
        raise AlreadyDisqualified(
            f"submission {submission_id} is already disqualified: "
            f"{submission.disqualified_reason}")
    repository.set_disqualification(session, submission_id=submission_id, at=now,
                                    by=actor.label, reason=reason.strip()[:MAX_REASON_CHARS])
    audit.record(session, actor=actor, action="submission.disqualify", now=now,
                 target_type="submission", target_id=submission_id,
                 assignment=submission.assignment,
                 details={"student_id": submission.student_id, "reason": reason.strip()})
    session.refresh(submission)
    return submission


def restore(
    session: Session, *, submission_id: int, reason: str | None, actor: audit.Actor,
    now: dt.datetime,
) -> Submission:
    """Lift a disqualification (the submission counts and ranks again); audited with the
    old reason and the optional reason for restoring.

    Raises:
        SubmissionNotFound: no such submission.
        NotDisqualified: it is not disqualified.
    """
    submission = _get(session, submission_id)
    if submission.disqualified_at is None:
        raise NotDisqualified(f"submission {submission_id} is not disqualified")
    previous = submission.disqualified_reason
    repository.set_disqualification(session, submission_id=submission_id, at=None, by=None,
                                    reason=None)
    audit.record(session, actor=actor, action="submission.restore", now=now,
                 target_type="submission", target_id=submission_id,
                 assignment=submission.assignment,
                 details={"student_id": submission.student_id,
                          "disqualified_reason": previous, "reason": reason})
    session.refresh(submission)
    return submission


def _get(session: Session, submission_id: int) -> Submission:
    submission = repository.get_submission(session, submission_id=submission_id)
    if submission is None:
        raise SubmissionNotFound(f"no submission {submission_id}")
    return submission
