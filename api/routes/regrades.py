"""Regrades with a preview (staff): choose submissions, re-run them, compare old and new
verdicts and scores side by side, then apply or discard (submissions/regrades.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from api.deps import NowDep, SessionDep, StaffOnly
from api.params import Offset, RegradeId
from api.presenters import regrade_read, regrade_summary
from api.schemas import ErrorResponse, RegradeCreate, RegradeList, RegradeRead, StoredText
from submissions import regrades

router = APIRouter(prefix="/api/v1/regrades", tags=["regrades"])

_NOT_FOUND = {404: {"model": ErrorResponse, "description": "regrade_not_found"}}
_DECIDED = {409: {"model": ErrorResponse, "description": "regrade_already_decided, or "
                  "regrade_pending (apply only)"}}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RegradeRead,
             responses={422: {"model": ErrorResponse,
                              "description": "regrade_empty, unknown_assignment"}})
def create_regrade(body: RegradeCreate, principal: StaffOnly, session: SessionDep,
                   now: NowDep) -> RegradeRead:
    """Queue a re-run of the chosen submissions (those whose current grading finished;
    filters: student, current verdict, grader version, ids). Nothing changes for students
    until the batch is applied. Audited."""
    selection = regrades.RegradeSelection(
        assignment=body.assignment, student_id=body.student_id, status=body.status,
        grader_version=body.grader_version,
        submission_ids=None if body.submission_ids is None else tuple(body.submission_ids))
    batch, busy = regrades.create_regrade(session, selection=selection, actor=principal.actor,
                                          now=now)
    preview = regrades.preview(session, batch_id=batch.id)
    return regrade_read(preview, left_out_busy=busy)


@router.get("", response_model=RegradeList)
def list_regrades(
    _: StaffOnly, session: SessionDep,
    assignment: Annotated[StoredText | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Offset = 0,
) -> RegradeList:
    """Regrade batches, newest first."""
    batches = regrades.list_batches(session, assignment=assignment, limit=limit, offset=offset)
    return RegradeList(regrades=[regrade_summary(b) for b in batches])


@router.get("/{regrade_id}", response_model=RegradeRead, responses=_NOT_FOUND)
def read_regrade(regrade_id: RegradeId, _: StaffOnly, session: SessionDep, now: NowDep) -> RegradeRead:
    """The preview: for every submission, the grading it re-runs and the new one (verdict,
    checks, headline, score, grader version) side by side; `pending` counts those not
    finished."""
    preview = regrades.preview(session, batch_id=regrade_id)
    return regrade_read(preview)


@router.post("/{regrade_id}/apply", response_model=RegradeRead,
             responses={**_NOT_FOUND, **_DECIDED})
def apply_regrade(regrade_id: RegradeId, principal: StaffOnly, session: SessionDep,
                  now: NowDep) -> RegradeRead:
    """Make the new gradings current (once none is pending). Infrastructure errors are not
    applied; both gradings stay in each submission's history. Audited."""
    preview, unchanged = regrades.apply(session, batch_id=regrade_id, actor=principal.actor,
                                        now=now)
    return regrade_read(preview, unchanged=unchanged)


@router.post("/{regrade_id}/discard", response_model=RegradeRead,
             responses={**_NOT_FOUND, **_DECIDED})
def discard_regrade(regrade_id: RegradeId, principal: StaffOnly, session: SessionDep,
                    now: NowDep) -> RegradeRead:
    """Close the batch without applying it (finished gradings stay in the history, queued
    ones are dropped). Audited."""
    preview = regrades.discard(session, batch_id=regrade_id, actor=principal.actor, now=now)
    return regrade_read(preview)
