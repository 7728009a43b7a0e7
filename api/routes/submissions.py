"""Submissions: upload (queued for grading by a worker, never graded in the request), read
one (with its source and its history of gradings), list, disqualify and restore (staff),
and export one in Gradescope's results.json format."""

from __future__ import annotations

import datetime as dt
import hashlib
from contextlib import contextmanager
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api import idempotent
from api.admission import Admission
from api.deps import (
    BearerToken,
    CurrentPrincipal,
    CurrentStudent,
    IdempotencyKeyDep,
    NowDep,
    Principal,
    SessionDep,
    SettingsDep,
    StaffOnly,
    principal_for_token,
    session_scope,
)
from api.longpoll import StatusWatcher
from api.params import MAX_DB_INT, Offset, SubmissionId
from api.presenters import grading_progress, grading_read, submission_read
from api.schemas import (
    TERMINAL,
    DisqualifyRequest,
    ErrorResponse,
    GradingList,
    RestoreRequest,
    Status,
    StoredText,
    SubmissionCreated,
    SubmissionList,
    SubmissionRead,
)
from api.uploads import UPLOAD_OPENAPI, UploadDep
from api.views import submission_summaries
from submissions import exports, grades, idempotency, moderation, repository, service, slip_days
from submissions.errors import Overloaded, StudentNotFound
from submissions.exports import GradescopeResults
from submissions.models import Submission
from submissions.settings import Settings

router = APIRouter(prefix="/api/v1/submissions", tags=["submissions"])

#: Longest long-poll of `read_submission` (seconds).
MAX_WAIT_S = 60
#: Statuses that never change by themselves (a long-poll on one answers at once).

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
    upload: UploadDep, principal: CurrentPrincipal, student: CurrentStudent,
    session: SessionDep, settings: SettingsDep, now: NowDep,
    idempotency_key: IdempotencyKeyDep = None,
) -> SubmissionCreated | JSONResponse:
    """Validate and queue an uploaded file (multipart field `file`, optional `assignment`).
    Returns 202: a worker grades it later; poll `GET /api/v1/submissions/{id}?wait=30`. The
    answer says whether the upload is late and how many submissions are used. With an
    `Idempotency-Key`, a retry of the same upload returns the first answer (the same
    submission id) and is neither stored nor counted again."""
    claim = idempotent.begin(
        session, principal=principal, key=idempotency_key, settings=settings, now=now,
        request_sha256=idempotency.fingerprint(
            "POST /api/v1/submissions", upload.assignment, upload.client_filename or "",
            hashlib.sha256(upload.content).hexdigest()))
    if isinstance(claim, JSONResponse):
        return claim
    queued = service.create_submission(
        session,
        student=student,
        assignment_name=upload.assignment,
        upload=upload.content,
        client_filename=upload.client_filename,
        settings=settings,
        now=now,
    )
    charge = queued.rules.charge(student_id=student.id, submission_id=queued.submission.id,
                                 uploaded_at=queued.submission.created_at)
    held = slip_days.account(session, student_id=student.id)
    answer = SubmissionCreated(
        id=queued.submission.id, status=queued.submission.current_grading.status
        if queued.submission.current_grading else "queued",
        assignment=queued.submission.assignment,
        late=charge.late,
        due_at=queued.rules.due_for(student.id), submissions_used=queued.used,
        max_submissions=queued.assignment.max_submissions,
        late_text=charge.describe() if charge.late_by.total_seconds() > 0 else None,
        slip_days_spent=held.spent.get(queued.submission.assignment, (0, 0))[1],
        slip_days_left=held.left,
    )
    idempotent.finish(session, claim, status_code=202, body=answer.model_dump(mode="json"))
    return answer


@router.get("", response_model=SubmissionList)
def list_submissions(
    principal: CurrentPrincipal,
    session: SessionDep,
    now: NowDep,
    student_id: Annotated[int | None, Query(ge=1, le=MAX_DB_INT,
                                              description="staff only: filter")] = None,
    assignment: Annotated[StoredText | None, Query(max_length=100)] = None,
    status: Annotated[Status | None, Query(description="current grading's status")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Offset = 0,
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


def _submission_view(session: Session, submission_id: int, principal: Principal,
                     now: dt.datetime, settings: Settings) -> SubmissionRead:
    """The submission as `principal` may read it (SubmissionNotFound otherwise), with its
    progress while unfinished."""
    submission = _visible(session, submission_id, principal)
    rules = grades.rules(session, assignment=submission.assignment, now=now,
                         student_id=submission.student_id)
    read = submission_read(submission, rules=rules, staff_view=principal.is_staff)
    read.progress = grading_progress(session, submission, limit_s=settings.grader_timeout_s, now=now)
    return read


@router.get(
    "/{submission_id}", response_model=SubmissionRead,
    responses={**_NOT_FOUND, 503: {"model": ErrorResponse, "description": "overloaded "
                                   "(see Retry-After)"}},
)
async def read_submission(
    request: Request, submission_id: SubmissionId, token: BearerToken, now: NowDep,
    wait: Annotated[int, Query(ge=0, le=MAX_WAIT_S, description=(
        "long-poll: seconds (0 to 60) to wait for the status to change; the answer comes as "
        "soon as it changes (within about a second) or when the wait ends, with the status "
        "then. 0 (the default) answers at once. A finished submission answers at once."
    ))] = 0,
) -> SubmissionRead:
    """Status, per-check verdicts, error, benchmark, log, score, lateness and
    disqualification of the current grading. Another student's submission is reported as
    not found. With `wait`, a long-poll that holds no thread and no database connection
    while it waits (one query every `GRADER_LONG_POLL_INTERVAL_S` seconds reads the status of
    every submission waited on in this process: api/longpoll.py)."""
    state = request.app.state
    admission: Admission = state.admission

    # Not SessionDep/CurrentPrincipal: a request-scoped session would keep its connection (and
    # its transaction) for the whole wait. Each read is one short session of its own, in the
    # thread pool, that checks the token again.
    def read() -> SubmissionRead:
        with contextmanager(session_scope)(state.session_factory) as session:
            principal = principal_for_token(session, token=token, settings=state.settings)
            return _submission_view(session, submission_id, principal, now, state.settings)

    if wait == 0:  # admitted as an ordinary request: it holds an `api` place already
        return await run_in_threadpool(read)
    # A long-poll holds a `wait` place, never an `api` one: each read queues for its own
    # (Overloaded, 503, only when none comes within the queue's target delay).
    async with admission.read_place():
        first = await run_in_threadpool(read)
    if first.status in TERMINAL:
        return first
    # One status query per interval for every waiter of this process (api/longpoll.py), then
    # one read of this submission, as an ordinary request makes. DatabaseUnavailable (503)
    # as soon as that query finds the database unreachable.
    watcher: StatusWatcher = state.status_watcher
    await watcher.wait_for_change(request, submission_id, first.status, timeout_s=wait)
    if watcher.closing:
        return first  # shutting down: answer now, the client polls the next process
    try:
        async with admission.read_place():
            return await run_in_threadpool(read)
    except Overloaded:
        return first  # saturated: the status as first read; the client polls again


class PythonSourceResponse(PlainTextResponse):
    """A stored source file: ``text/x-python; charset=utf-8`` (also in the OpenAPI
    document)."""

    media_type = "text/x-python"


@router.get("/{submission_id}/source", response_class=PythonSourceResponse,
            responses=_NOT_FOUND)
def read_submission_source(
    submission_id: SubmissionId, principal: CurrentPrincipal, session: SessionDep
) -> PythonSourceResponse:
    """The stored source text (its owner, or staff); its sha256 is in `X-Source-SHA256`
    and the uploaded file name in `Content-Disposition`."""
    submission = _visible(session, submission_id, principal)
    filename = submission.original_filename or f"{submission.assignment}.py"
    return PythonSourceResponse(
        submission.source_text,
        headers={"X-Source-SHA256": submission.source_sha256,
                 "Content-Disposition": _inline_filename(filename)},
    )


def _inline_filename(filename: str) -> str:
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "_")
    return f"inline; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"


@router.get("/{submission_id}/gradings", response_model=GradingList, responses=_NOT_FOUND)
def list_gradings(
    submission_id: SubmissionId, principal: CurrentPrincipal, session: SessionDep, now: NowDep
) -> GradingList:
    """Every grading of the submission, oldest first: its upload's, regrades (with the
    grader version that produced each) and final ranking runs. Seeds are staff-only."""
    submission = _visible(session, submission_id, principal)
    rules = grades.rules(session, assignment=submission.assignment, now=now,
                         student_id=submission.student_id)
    return GradingList(gradings=[
        grading_read(g, rules=rules, staff_view=principal.is_staff)
        for g in repository.list_gradings(session, submission_id=submission.id)
    ])


@router.get("/{submission_id}/gradescope", response_model=GradescopeResults,
            responses=_NOT_FOUND)
def export_gradescope(
    submission_id: SubmissionId, principal: CurrentPrincipal, session: SessionDep, now: NowDep
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
    submission_id: SubmissionId, body: DisqualifyRequest, principal: StaffOnly, session: SessionDep,
    now: NowDep, settings: SettingsDep,
) -> SubmissionRead:
    """Disqualify (staff): hidden from rankings, final runs and scores; its owner sees it
    with the reason. Audited."""
    moderation.disqualify(session, submission_id=submission_id, reason=body.reason,
                          actor=principal.actor, now=now)
    return _submission_view(session, submission_id, principal, now, settings)


@router.post("/{submission_id}/restore", response_model=SubmissionRead,
             responses={**_NOT_FOUND, 409: {"model": ErrorResponse,
                                            "description": "not_disqualified"}})
def restore_submission(
    submission_id: SubmissionId, body: RestoreRequest, principal: StaffOnly, session: SessionDep,
    now: NowDep, settings: SettingsDep,
) -> SubmissionRead:
    """Lift a disqualification (staff). Audited."""
    moderation.restore(session, submission_id=submission_id, reason=body.reason,
                       actor=principal.actor, now=now)
    return _submission_view(session, submission_id, principal, now, settings)
