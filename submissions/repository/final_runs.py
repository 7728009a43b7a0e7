"""Final ranking runs and their gradings."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from submissions.models import FinalRun, Grading, Submission

__all__ = ["final_run_gradings", "get_final_run", "insert_final_run", "latest_final_run",
           "list_final_runs"]


def insert_final_run(
    session: Session, *, assignment: str, seed: int, created_by: str, now: dt.datetime
) -> FinalRun:
    """Insert a final run; flushes to assign the id."""
    run = FinalRun(assignment=assignment, seed=seed, created_by=created_by, created_at=now)
    session.add(run)
    session.flush()
    return run


def get_final_run(session: Session, *, final_run_id: int) -> FinalRun | None:
    """The run, or None."""
    return session.get(FinalRun, final_run_id)


def latest_final_run(session: Session, *, assignment: str) -> FinalRun | None:
    """The newest final run of `assignment` (the one that decides its ranks), or None."""
    return session.scalars(
        select(FinalRun).where(FinalRun.assignment == assignment)
        .order_by(FinalRun.id.desc()).limit(1)
    ).first()


def list_final_runs(session: Session, *, assignment: str) -> Sequence[FinalRun]:
    """Every final run of `assignment`, newest first."""
    return session.scalars(
        select(FinalRun).where(FinalRun.assignment == assignment).order_by(FinalRun.id.desc())
    ).all()


def final_run_gradings(session: Session, *, final_run_id: int) -> Sequence[Grading]:
    """The run's gradings (one per student), oldest first, with their checks, submission,
    the submission's student and current grading loaded."""
    return session.scalars(
        select(Grading)
        .where(Grading.final_run_id == final_run_id)
        .options(
            selectinload(Grading.checks),
            selectinload(Grading.submission).selectinload(Submission.student),
            selectinload(Grading.submission).selectinload(Submission.current_grading),
        )
        .order_by(Grading.id)
    ).all()
