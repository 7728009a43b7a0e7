"""Regrades with a preview: staff choose submissions, each is re-run (same seed, the
grader as it is now) as a new grading beside the current one; the batch shows old and new
verdict and score side by side; applying makes the new gradings current, discarding leaves
them in the history only. Nothing a student sees changes until the batch is applied.

Gradings that broke on our side (infrastructure errors) are never applied: the submission
keeps its current grading, and the preview says so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from sqlalchemy.orm import Session

from submissions import assignments, audit, grades, repository, slip_days
from submissions.errors import RegradeDecided, RegradeEmpty, RegradeNotFound, RegradePending
from submissions.models import (
    INFRASTRUCTURE_ERROR,
    TERMINAL_STATUSES,
    Grading,
    GradingPurpose,
    RegradeBatch,
    RegradeState,
    Submission,
)
from submissions.repository import PRIORITY_STAFF
from submissions.scoring import Grade

#: Most submissions one batch re-runs.
MAX_BATCH = 2000


@dataclass(frozen=True)
class RegradeSelection:
    """Which submissions to re-run: those of `assignment` whose current grading finished,
    narrowed by any of the other fields (None: no filter). ``status`` and
    ``grader_version`` are those of the current grading."""

    assignment: str
    student_id: int | None = None
    status: str | None = None
    grader_version: str | None = None
    submission_ids: tuple[int, ...] | None = None


def create_regrade(
    session: Session, *, selection: RegradeSelection, actor: audit.Actor, now: dt.datetime
) -> tuple[RegradeBatch, int]:
    """Queue a regrade of every selected submission (at most MAX_BATCH, behind students'
    uploads in the queue); audited. Returns the batch and how many matching submissions
    were left out because another open batch is regrading them.

    Raises:
        UnknownAssignment: the assignment is not in the manifest.
        RegradeEmpty: nothing to regrade.
    """
    assignments.resolve_manifest(selection.assignment)
    chosen, busy = repository.select_submissions_for_regrade(
        session, assignment=selection.assignment, student_id=selection.student_id,
        status=selection.status, grader_version=selection.grader_version,
        submission_ids=selection.submission_ids, limit=MAX_BATCH,
    )
    if not chosen:
        raise RegradeEmpty("no finished submission matches the selection"
                           + (f" ({busy} are in another open regrade batch)" if busy else ""),
                           busy=busy)
    stored_selection = {k: (list(v) if isinstance(v, tuple) else v)
                        for k, v in asdict(selection).items()}
    batch = repository.insert_regrade_batch(
        session, assignment=selection.assignment, selection=stored_selection,
        created_by=actor.label, now=now)
    for submission in chosen:
        current = submission.current_grading
        repository.insert_grading(
            session, submission_id=submission.id, purpose=GradingPurpose.REGRADE,
            seed=submission.seed, is_current=False, priority=PRIORITY_STAFF, now=now,
            requested_by=actor.label, regrade_batch_id=batch.id,
            replaces_grading_id=None if current is None else current.id,
        )
    audit.record(session, actor=actor, action="regrade.create", now=now,
                 target_type="regrade", target_id=batch.id, assignment=selection.assignment,
                 details={"selection": stored_selection, "submissions": len(chosen),
                          "left_out_busy": busy})
    return batch, busy


@dataclass(frozen=True)
class RegradeComparison:
    """One submission of a batch: the grading it re-runs (`before`) and the new one."""

    submission: Submission
    before: Grading | None
    after: Grading
    before_score: Grade | None
    after_score: Grade | None
    applied: bool

    @property
    def finished(self) -> bool:
        """The new grading has a verdict (or gave up)."""
        return self.after.status in TERMINAL_STATUSES

    @property
    def applicable(self) -> bool:
        """Finished with a verdict of the submission's (not an infrastructure error)."""
        return self.finished and self.after.error_kind != INFRASTRUCTURE_ERROR

    @property
    def verdict_changed(self) -> bool:
        """The new verdict (or error kind) differs from the old one."""
        if not self.finished or self.before is None:
            return False
        return (self.before.status, self.before.error_kind) != (
            self.after.status, self.after.error_kind)

    @property
    def score_delta(self) -> float | None:
        """New grade minus old grade (None until both are known)."""
        if self.before_score is None or self.after_score is None:
            return None
        return self.after_score.total - self.before_score.total


@dataclass(frozen=True)
class RegradePreview:
    """A batch and its comparisons."""

    batch: RegradeBatch
    comparisons: list[RegradeComparison]

    @property
    def pending(self) -> int:
        """Gradings not finished yet."""
        return sum(1 for c in self.comparisons if not c.finished)

    @property
    def changed(self) -> int:
        """Finished gradings whose verdict or score differs from the old one."""
        return sum(1 for c in self.comparisons
                   if c.verdict_changed or (c.score_delta is not None and c.score_delta != 0))


def preview(session: Session, *, batch_id: int) -> RegradePreview:
    """Old and new verdict and score of every submission of the batch.

    Raises:
        RegradeNotFound: no such batch.
    """
    batch = _get(session, batch_id)
    rules = grades.rules(session, assignment=batch.assignment, now=batch.created_at)
    comparisons = [
        RegradeComparison(
            submission=grading.submission,
            before=grading.replaces,
            after=grading,
            before_score=None if grading.replaces is None
            else rules.grade_of(grading.submission, grading.replaces),
            after_score=rules.grade_of(grading.submission, grading),
            applied=grading.is_current,
        )
        for grading in repository.regrade_gradings(session, batch_id=batch_id)
    ]
    return RegradePreview(batch=batch, comparisons=comparisons)


def plan_apply(session: Session, *, batch_id: int) -> RegradePreview:
    """The preview `apply` would apply, after its checks; nothing is written (what the
    confirmation page counts).

    Raises:
        RegradeNotFound: no such batch.
        RegradeDecided: it was already applied or discarded.
        RegradePending: some gradings have not finished.
    """
    before = preview(session, batch_id=batch_id)
    _check_open(before.batch)
    if before.pending:
        raise RegradePending(f"{before.pending} grading(s) of regrade {batch_id} have not "
                             "finished; apply when the preview shows none pending",
                             pending=before.pending)
    return before


def apply(session: Session, *, batch_id: int, actor: audit.Actor,
          now: dt.datetime) -> tuple[RegradePreview, list[int]]:
    """Make every applicable new grading of the batch current; audited. Returns the
    preview after applying and the ids of the submissions left unchanged (an
    infrastructure error, or their current grading changed since the regrade was queued).

    Raises:
        RegradeNotFound: no such batch.
        RegradeDecided: it was already applied or discarded.
        RegradePending: some gradings have not finished.
    """
    before = plan_apply(session, batch_id=batch_id)
    if not repository.set_regrade_state(session, batch_id=batch_id, state=RegradeState.APPLIED,
                                        by=actor.label, now=now):
        raise RegradeDecided(f"regrade {batch_id} was decided meanwhile")
    applied, unchanged = [], []
    for comparison in before.comparisons:
        if comparison.applicable and comparison.before is not None and \
                repository.set_current_grading(
                    session, submission_id=comparison.submission.id,
                    grading_id=comparison.after.id,
                    replaces_grading_id=comparison.before.id):
            applied.append(comparison.submission.id)
        else:
            unchanged.append(comparison.submission.id)
    # Which submission counts, and so what slip days are spent on, may have changed.
    for student_id in sorted({c.submission.student_id for c in before.comparisons}):
        slip_days.rederive(session, student_id=student_id, now=now)
    audit.record(session, actor=actor, action="regrade.apply", now=now,
                 target_type="regrade", target_id=batch_id, assignment=before.batch.assignment,
                 details={"applied": applied, "unchanged": unchanged,
                          "changed": before.changed})
    session.expire_all()
    return preview(session, batch_id=batch_id), unchanged


def discard(session: Session, *, batch_id: int, actor: audit.Actor,
            now: dt.datetime) -> RegradePreview:
    """Close the batch without applying it: finished gradings stay in the history,
    queued ones are deleted (never run); audited.

    Raises:
        RegradeNotFound: no such batch.
        RegradeDecided: it was already applied or discarded.
    """
    batch = _get(session, batch_id)
    _check_open(batch)
    if not repository.set_regrade_state(session, batch_id=batch_id,
                                        state=RegradeState.DISCARDED, by=actor.label, now=now):
        raise RegradeDecided(f"regrade {batch_id} was decided meanwhile")
    deleted = repository.delete_queued_gradings(session, batch_id=batch_id)
    audit.record(session, actor=actor, action="regrade.discard", now=now,
                 target_type="regrade", target_id=batch_id, assignment=batch.assignment,
                 details={"deleted_queued": deleted})
    session.expire_all()
    return preview(session, batch_id=batch_id)


def list_batches(session: Session, *, assignment: str | None, limit: int,
                 offset: int) -> Sequence[RegradeBatch]:
    """Batches, newest first."""
    return repository.list_regrade_batches(session, assignment=assignment, limit=limit,
                                           offset=offset)


def _get(session: Session, batch_id: int) -> RegradeBatch:
    batch = repository.get_regrade_batch(session, batch_id=batch_id)
    if batch is None:
        raise RegradeNotFound(f"no regrade {batch_id}")
    return batch


def _check_open(batch: RegradeBatch) -> None:
    if batch.state != RegradeState.OPEN:
        raise RegradeDecided(f"regrade {batch.id} is already {batch.state}", state=batch.state)
