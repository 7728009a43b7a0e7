"""Submissions: upload (queued for grading by a worker, never graded in the request),
read one, list, and (instructor) read the stored source."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status
from fastapi.responses import PlainTextResponse

from api.deps import CurrentPrincipal, CurrentStudent, InstructorOnly, SessionDep, SettingsDep
from api.schemas import (
    ErrorResponse,
    SubmissionCreated,
    SubmissionList,
    SubmissionRead,
    SubmissionSummary,
)
from api.uploads import UPLOAD_OPENAPI, UploadDep
from submissions import repository, service
from submissions.errors import StudentNotFound
from submissions.models import utc_now

router = APIRouter(prefix="/api/v1/submissions", tags=["submissions"])

_UPLOAD_ERRORS = {
    401: {"model": ErrorResponse, "description": "missing or invalid token"},
    413: {"model": ErrorResponse, "description": "file larger than the cap"},
    422: {"model": ErrorResponse, "description": "not multipart (upload_malformed), no `file` "
          "field (upload_missing_file), empty file (upload_empty), not UTF-8, not Python, "
          "or missing function"},
    429: {"model": ErrorResponse, "description": "rate limited (see Retry-After)"},
}


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmissionCreated,
    responses=_UPLOAD_ERRORS,
    openapi_extra=UPLOAD_OPENAPI,
)
def create_submission(
    upload: UploadDep, student: CurrentStudent, session: SessionDep, settings: SettingsDep
) -> SubmissionCreated:
    """Validate and queue an uploaded file (multipart field `file`). Returns 202: a worker
    grades it later; poll `GET /api/v1/submissions/{id}`."""
    submission = service.create_submission(
        session,
        student=student,
        assignment_name=upload.assignment,
        upload=upload.content,
        client_filename=upload.client_filename,
        settings=settings,
        now=utc_now(),
    )
    return SubmissionCreated(id=submission.id, status=submission.status)


@router.get("", response_model=SubmissionList)
def list_submissions(
    principal: CurrentPrincipal,
    session: SessionDep,
    student_id: Annotated[int | None, Query(description="instructor only: filter")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> SubmissionList:
    """The caller's submissions, newest first; the instructor sees all (or one student's)."""
    if principal.is_instructor:
        if student_id is not None and repository.get_student(session, student_id=student_id) is None:
            raise StudentNotFound(f"no student {student_id}")
        owner = student_id
    else:
        owner = principal.student_id
    rows = repository.list_submissions(session, student_id=owner, limit=limit, offset=offset)
    return SubmissionList(
        submissions=[
            SubmissionSummary(
                id=s.id, student_id=s.student_id, assignment=s.assignment, status=s.status,
                headline_speedup=s.headline_speedup, created_at=s.created_at,
                finished_at=s.finished_at,
            )
            for s in rows
        ]
    )


@router.get("/{submission_id}", response_model=SubmissionRead,
            responses={404: {"model": ErrorResponse}})
def read_submission(
    submission_id: int, principal: CurrentPrincipal, session: SessionDep
) -> SubmissionRead:
    """Status, per-check verdicts, error, benchmark, timestamps, worker and attempts.
    Another student's submission is reported as not found."""
    submission = service.get_visible_submission(
        session, submission_id=submission_id, viewer_student_id=principal.student_id
    )
    return SubmissionRead.from_submission(submission, instructor_view=principal.is_instructor)


@router.get("/{submission_id}/source", response_class=PlainTextResponse,
            responses={404: {"model": ErrorResponse}})
def read_submission_source(
    submission_id: int, _: InstructorOnly, session: SessionDep
) -> PlainTextResponse:
    """The stored source text (instructor only); its sha256 is in `X-Source-SHA256`."""
    submission = service.get_visible_submission(
        session, submission_id=submission_id, viewer_student_id=None
    )
    return PlainTextResponse(
        submission.source_text,
        media_type="text/x-python; charset=utf-8",
        headers={"X-Source-SHA256": submission.source_sha256},
    )
