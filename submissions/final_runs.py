"""The final ranking run (KernelBot's secret-seed approach): after the due date, each
student's best passing on-time submission is re-graded on one fresh secret seed, and the
ranked number is that run's headline. A submission that fails there loses its rank, with the
reason shown; correctness points are not taken away (docs/course.md, "Points").

The seed is drawn from the operating system's CSPRNG when the run starts, stored on the run
(staff may read it to reproduce a grading) and never put in an answer a student can read:
the API removes it from every grading and result document shown to students. One seed for the
whole run: every student is measured on the same inputs, and the benchmark's peer timings
can be shared between their gradings.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Sequence

from sqlalchemy.orm import Session

from submissions import assignments, audit, lateness, repository, standings
from submissions.errors import (
    BeforeDueDate,
    FinalRunEmpty,
    FinalRunInProgress,
    FinalRunNotFound,
    NoDueDate,
)
from submissions.models import TERMINAL_STATUSES, FinalRun, Grading, GradingPurpose
from submissions.repository import PRIORITY_STAFF, SubmissionVerdict


def new_secret_seed() -> int:
    """A fresh 63-bit seed (fits a signed BIGINT) from the OS CSPRNG; never 0."""
    return secrets.randbits(63) or 1


def plan_final_run(
    session: Session, *, assignment: str, now: dt.datetime
) -> list[SubmissionVerdict]:
    """The submissions a final run of `assignment` started `now` would re-grade (one per
    student, best first), after every check `start_final_run` makes; nothing is written.
    What the confirmation page counts before anything starts.

    Raises:
        UnknownAssignment: not in the manifest.
        NoDueDate: the assignment has no due date.
        BeforeDueDate: `now` is not after the due date.
        FinalRunInProgress: the previous run still has unfinished gradings.
        FinalRunEmpty: no student has a passing, on-time, not disqualified submission.
    """
    rules, entries = standings.rankable_submissions(session, assignment=assignment, now=now)
    row = rules.assignment
    if row.due_at is None:
        raise NoDueDate(f"{assignment} has no due date; set one first")
    # After every due date in force: a student with an extension may still upload.
    last_due = max([row.due_at, *(rules.due_for(sid) or row.due_at for sid in rules.extensions)])
    if not lateness.is_late(now, last_due):
        due = assignments.iso_utc(last_due)
        raise BeforeDueDate(f"{assignment} is due at {due} (the last due date in force, "
                            "extensions included); a final run starts after it", due_at=due)
    previous = repository.latest_final_run(session, assignment=assignment)
    if previous is not None and any(
        g.status not in TERMINAL_STATUSES
        for g in repository.final_run_gradings(session, final_run_id=previous.id)
    ):
        raise FinalRunInProgress(f"final run {previous.id} of {assignment} has not finished")
    if not entries:
        raise FinalRunEmpty(f"no student has a passing on-time submission of {assignment}")
    return list(entries)


def start_final_run(
    session: Session, *, assignment: str, actor: audit.Actor, now: dt.datetime
) -> tuple[FinalRun, int]:
    """Queue the final ranking run of `assignment`; audited (without the seed). Returns
    the run and the number of students in it. A new run supersedes the previous one once
    it has finished (submissions/standings.py).

    Raises: as `plan_final_run`.
    """
    entries = plan_final_run(session, assignment=assignment, now=now)
    seed = new_secret_seed()
    run = repository.insert_final_run(session, assignment=assignment, seed=seed,
                                      created_by=actor.label, now=now)
    for entry in entries:
        repository.insert_grading(
            session, submission_id=entry.submission_id, purpose=GradingPurpose.FINAL,
            seed=seed, is_current=False, priority=PRIORITY_STAFF, now=now,
            requested_by=actor.label, final_run_id=run.id,
        )
    audit.record(session, actor=actor, action="final_run.create", now=now,
                 target_type="final_run", target_id=run.id, assignment=assignment,
                 details={"students": len(entries),
                          "submissions": [e.submission_id for e in entries]})
    return run, len(entries)


def latest(session: Session, *, assignment: str) -> tuple[FinalRun, Sequence[Grading]]:
    """The latest final run of `assignment` and its gradings.

    Raises:
        UnknownAssignment: not in the manifest.
        FinalRunNotFound: no final run yet.
    """
    assignments.resolve_manifest(assignment)
    run = repository.latest_final_run(session, assignment=assignment)
    if run is None:
        raise FinalRunNotFound(f"{assignment} has no final ranking run yet")
    return run, repository.final_run_gradings(session, final_run_id=run.id)
