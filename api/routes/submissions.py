"""Submissions: upload (queued for grading by a worker, never graded in the request), read
one (with its source and its history of gradings), list, disqualify and restore (staff),
and export one in Gradescope's results.json format."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, status
from fastapi.responses import PlainTextResponse

from sqlalchemy.orm import Session

from api.deps import (
    CurrentPrincipal,
    CurrentStudent,
    NowDep,
    Principal,
    SessionDep,
    SettingsDep,
    StaffOnly,
)
from api.presenters import grading_read, submission_read
from api.schemas import (
    DisqualifyRequest,
    ErrorResponse,
    GradingList,
    RestoreRequest,
    Status,
    SubmissionCreated,
    SubmissionList,
    SubmissionRead,
)
from api.uploads import UPLOAD_OPENAPI, UploadDep
from api.views import submission_summaries
from submissions import assignments, exports, moderation, repository, service
from submissions.errors import StudentNotFound
from submissions.exports import GradescopeResults
from submissions.models import Submission

router = APIRouter(prefix="/api/v1/submissions", tags=["submissions"])

_UPLOAD_ERRORS = {
    401: {"model": ErrorResponse, "description": "missing or invalid token"},
    403: {"model": ErrorResponse, "description": "not open yet (assignment_not_open), past "
          "the due date with late policy `refuse` (assignment_closed), every allowed "
          "submission used (submission_limit_reached), or a staff token (student_required)"},
    413: {"model": ErrorResponse, "description": "file larger than the cap"},
    422: {"model": ErrorResponse, "description": "not multipart (upload_malformed), no `file` "
          "field (upload_missing_file), empty file (upload_empty), not UTF-8, not Python, "
          "missing function, or unknown assignment"},
    429: {"model": ErrorResponse, "description": "rate limited (see Retry-After)"},
}
_NOT_FOUND = {404: {"model": ErrorResponse, "description": "submission_not_found (also for "
                    "another student's submission)"}}


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmissionCreated,
    responses=_UPLOAD_ERRORS,
    openapi_extra=UPLOAD_OPENAPI,
)
def create_submission(
    upload: UploadDep, student: CurrentStudent, session: SessionDep, settings: SettingsDep,
    now: NowDep,
) -> SubmissionCreated:
    """Validate and queue an uploaded file (multipart field `file`, optional `assignment`).
    Returns 202: a worker grades it later; poll `GET /api/v1/submissions/{id}`. The answer
    says whether the upload is late and how many submissions are used."""
    queued = service.create_submission(
        session,
        student=student,
        assignment_name=upload.assignment,
        upload=upload.content,
        client_filename=upload.client_filename,
        settings=settings,
        now=now,
    )
    return SubmissionCreated(
        id=queued.submission.id, status=queued.submission.current_grading.status
        if queued.submission.current_grading else "queued",
        assignment=queued.submission.assignment, late=queued.submission.is_late,
        due_at=queued.assignment.due_at, submissions_used=queued.used,
        max_submissions=queued.assignment.max_submissions,
    )


@router.get("", response_model=SubmissionList)
def list_submissions(
    principal: CurrentPrincipal,
    session: SessionDep,
    now: NowDep,
    student_id: Annotated[int | None, Query(description="staff only: filter")] = None,
    assignment: Annotated[str | None, Query(max_length=100)] = None,
    status: Annotated[Status | None, Query(description="current grading's status")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> SubmissionList:
    """The caller's submissions, newest first; staff see all (or one student's)."""
    if principal.is_staff:
        if student_id is not None and repository.get_student(session, student_id=student_id) is None:
            raise StudentNotFound(f"no student {student_id}")
        owner = student_id
    else:
        owner = principal.student_id
    return SubmissionList(submissions=submission_summaries(
        session, student_id=owner, assignment=assignment, status=status, limit=limit,
        offset=offset, now=now))


def _visible(session: Session, submission_id: int, principal: Principal) -> Submission:
    """The submission if `principal` may see it (its owner, or staff); else
    SubmissionNotFound."""
    return service.get_visible_submission(
        session, submission_id=submission_id, viewer_student_id=principal.student_id)


@router.get("/{submission_id}", response_model=SubmissionRead, responses=_NOT_FOUND)
def read_submission(
    submission_id: int, principal: CurrentPrincipal, session: SessionDep, now: NowDep
) -> SubmissionRead:
    """Status, per-check verdicts, error, benchmark, log, score, lateness and
    disqualification of the current grading. Another student's submission is reported as
    not found."""
    submission = _visible(session, submission_id, principal)
    row = assignments.load(session, name=submission.assignment, now=now)
    return submission_read(submission, policy=assignments.points_policy(row),
                           due_at=row.due_at, staff_view=principal.is_staff)


@router.get("/{submission_id}/source", response_class=PlainTextResponse, responses=_NOT_FOUND)
def read_submission_source(
    submission_id: int, principal: CurrentPrincipal, session: SessionDep
) -> PlainTextResponse:
    """The stored source text (its owner, or staff); its sha256 is in `X-Source-SHA256`
    and the uploaded file name in `Content-Disposition`."""
    submission = _visible(session, submission_id, principal)
    filename = submission.original_filename or f"{submission.assignment}.py"
    return PlainTextResponse(
        submission.source_text,
        media_type="text/x-python; charset=utf-8",
        headers={"X-Source-SHA256": submission.source_sha256,
                 "Content-Disposition": _inline_filename(filename)},
    )


def _inline_filename(filename: str) -> str:
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "_")
    return f"inline; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"


@router.get("/{submission_id}/gradings", response_model=GradingList, responses=_NOT_FOUND)
def list_gradings(
    submission_id: int, principal: CurrentPrincipal, session: SessionDep, now: NowDep
) -> GradingList:
    """Every grading of the submission, oldest first: its upload's, regrades (with the
    grader version that produced each) and final ranking runs. Seeds are staff-only."""
    submission = _visible(session, submission_id, principal)
    policy = assignments.points_policy(assignments.load(session, name=submission.assignment,
                                                        now=now))
    return GradingList(gradings=[
        grading_read(g, policy=policy, staff_view=principal.is_staff)
        for g in repository.list_gradings(session, submission_id=submission.id)
    ])


@router.get("/{submission_id}/gradescope", response_model=GradescopeResults,
            responses=_NOT_FOUND)
def export_gradescope(
    submission_id: int, principal: CurrentPrincipal, session: SessionDep, now: NowDep
) -> GradescopeResults:
    """The current grading in Gradescope's autograder results.json format (tests with
    name, score, max_score, status, output, visibility; top-level score). Its owner or
    staff (staff exports are audited)."""
    submission = _visible(session, submission_id, principal)
    return exports.gradescope_results(
        session, submission=submission, actor=principal.actor if principal.is_staff else None,
        now=now)


@router.post("/{submission_id}/disqualify", response_model=SubmissionRead,
             responses={**_NOT_FOUND, 409: {"model": ErrorResponse,
                                            "description": "already_disqualified"}})
def disqualify_submission(
    submission_id: int, body: DisqualifyRequest, principal: StaffOnly, session: SessionDep,
    now: NowDep,
) -> SubmissionRead:
    """Disqualify (staff): hidden from rankings, final runs and scores; its owner sees it
    with the reason. Audited."""
    moderation.disqualify(session, submission_id=submission_id, reason=body.reason,
                          actor=principal.actor, now=now)
    return read_submission(submission_id, principal, session, now)


@router.post("/{submission_id}/restore", response_model=SubmissionRead,
             responses={**_NOT_FOUND, 409: {"model": ErrorResponse,
                                            "description": "not_disqualified"}})
def restore_submission(
    submission_id: int, body: RestoreRequest, principal: StaffOnly, session: SessionDep,
    now: NowDep,
) -> SubmissionRead:
    """Lift a disqualification (staff). Audited."""
    moderation.restore(session, submission_id=submission_id, reason=body.reason,
                       actor=principal.actor, now=now)
    return read_submission(submission_id, principal, session, now)
