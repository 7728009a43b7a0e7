"""Pages every signed-in person uses (students for their own work, staff for anyone's):
upload, a submission's live report, its source, the history, the leaderboard."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import PlainTextResponse, Response
from sqlalchemy.orm import Session

from api.deps import NowDep, SessionDep, SettingsDep
from api.pages.rendering import PageRoute, redirect, render
from api.pages.report import build_report
from api.pages.security import StudentViewer, Viewer, ViewerDep, check_csrf
from api.params import MAX_DB_INT
from api.presenters import grading_progress, grading_read, submission_read
from api.schemas import AssignmentRead, Status
from api.uploads import UploadDep
from api.views import assignment_view, leaderboard_view, submission_summaries
from grader.manifest import DEFAULT_ASSIGNMENT, MANIFESTS
from submissions import grades, repository, service
from submissions.errors import DomainError
from submissions.settings import Settings

router = APIRouter(route_class=PageRoute, include_in_schema=False, tags=["pages"])

#: Submissions per history page.
PAGE_SIZE = 50
#: Ids and offsets fit PostgreSQL's INTEGER (a larger one is a 422 page, never a 500;
#: api/params.py).
SubmissionId = Annotated[int, Path(ge=1, le=MAX_DB_INT)]


def _course(session: Session, viewer: Viewer, settings: Settings, now) -> list[AssignmentRead]:  # noqa: ANN001
    return [assignment_view(session, name=name, principal=viewer.principal, settings=settings,
                            now=now) for name in MANIFESTS]


@router.get("/submit")
def read_upload_form(request: Request, viewer: StudentViewer, session: SessionDep,
                     settings: SettingsDep, now: NowDep,
                     assignment: Annotated[str, Query(max_length=100)] = DEFAULT_ASSIGNMENT,
                     ) -> Response:
    """Pick or drop a file, choose the assignment; its due date, late policy and the
    submissions left are shown beside it."""
    return render(request, "upload.html", viewer=viewer,
                  assignments=_course(session, viewer, settings, now), selected=assignment,
                  max_upload_bytes=settings.max_upload_bytes, error=None)


@router.post("/submit")
def create_upload(request: Request, viewer: StudentViewer, upload: UploadDep,
                  session: SessionDep, settings: SettingsDep, now: NowDep) -> Response:
    """The same upload as ``POST /api/v1/submissions`` (service.create_submission), from a
    form; then the submission's report. A refused upload shows the form again with why."""
    check_csrf(viewer, upload.csrf_token)
    try:
        queued = service.create_submission(
            session, student=viewer.principal.student, assignment_name=upload.assignment,
            upload=upload.content, client_filename=upload.client_filename, settings=settings,
            now=now)
    except DomainError as exc:
        session.rollback()
        retry = getattr(exc, "retry_after_s", None)
        return render(request, "upload.html", viewer=viewer, status_code=exc.http_status,
                      headers={"Retry-After": str(retry)} if retry else None,
                      assignments=_course(session, viewer, settings, now),
                      selected=upload.assignment, max_upload_bytes=settings.max_upload_bytes,
                      error=exc)
    return redirect(f"/submissions/{queued.submission.id}")


@router.get("/submissions")
def read_history(request: Request, viewer: ViewerDep, session: SessionDep, now: NowDep,
                 assignment: Annotated[str | None, Query(max_length=100)] = None,
                 status: Status | None = None,
                 student_id: Annotated[int | None, Query(ge=1, le=MAX_DB_INT)] = None,
                 offset: Annotated[int, Query(ge=0, le=MAX_DB_INT)] = 0) -> Response:
    """A student's submissions, newest first (staff: everyone's, or one student's)."""
    owner = student_id if viewer.is_staff else viewer.principal.student_id
    rows = submission_summaries(session, student_id=owner, assignment=assignment or None,
                                status=status, limit=PAGE_SIZE + 1, offset=offset, now=now)
    names = {s.id: s.name for s in repository.list_students(session)} if viewer.is_staff else {}
    return render(request, "history.html", viewer=viewer, rows=rows[:PAGE_SIZE],
                  more=len(rows) > PAGE_SIZE, offset=offset, page_size=PAGE_SIZE,
                  assignment=assignment or "", status=status or "", student_id=student_id,
                  names=names, assignment_names=list(MANIFESTS))


@router.get("/submissions/{submission_id}")
def read_report(request: Request, submission_id: SubmissionId,
                viewer: ViewerDep, session: SessionDep, now: NowDep, settings: SettingsDep,
                done: str | None = None) -> Response:
    """Status while queued or running (refreshed by htmx every 2 s); then the per-check
    table, the error, the captured output and one chart per benchmark row; score, lateness,
    disqualification; the gradings' history. Staff also get disqualify/restore."""
    submission = service.get_visible_submission(
        session, submission_id=submission_id, viewer_student_id=viewer.principal.student_id)
    rules = grades.rules(session, assignment=submission.assignment, now=now,
                         student_id=submission.student_id)
    read = submission_read(submission, rules=rules, staff_view=viewer.is_staff)
    read.progress = grading_progress(session, submission, limit_s=settings.grader_timeout_s, now=now)
    gradings = [grading_read(g, rules=rules, staff_view=viewer.is_staff)
                for g in repository.list_gradings(session, submission_id=submission.id)]
    return render(request, "submission.html", viewer=viewer, submission=read,
                  report=build_report(read), gradings=gradings, done=done)


@router.get("/submissions/{submission_id}/source")
def read_source(request: Request, submission_id: SubmissionId, viewer: ViewerDep,
                session: SessionDep) -> Response:
    """The uploaded file (its owner, or staff), shown as text."""
    submission = service.get_visible_submission(
        session, submission_id=submission_id, viewer_student_id=viewer.principal.student_id)
    return render(request, "source.html", viewer=viewer, submission=submission,
                  lines=submission.source_text.split("\n"))


@router.get("/submissions/{submission_id}/download")
def download_source(submission_id: SubmissionId, viewer: ViewerDep, session: SessionDep) -> Response:
    """The uploaded file as a download (plain text, never rendered by the browser)."""
    submission = service.get_visible_submission(
        session, submission_id=submission_id, viewer_student_id=viewer.principal.student_id)
    filename = submission.original_filename or f"{submission.assignment}.py"
    return PlainTextResponse(
        submission.source_text, media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": _attachment(filename),
                 "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"})


@router.get("/leaderboard")
def read_leaderboard_page(request: Request, viewer: ViewerDep, session: SessionDep,
                          now: NowDep,
                          assignment: Annotated[str, Query(max_length=100)] = DEFAULT_ASSIGNMENT,
                          ) -> Response:
    """The board as the API shows it to this viewer (api/views.py): anonymised for
    students with their own row marked, with names for staff; speed bars."""
    board = leaderboard_view(session, assignment=assignment, principal=viewer.principal, now=now)
    best = max((r.headline_speedup for r in board.rows if r.headline_speedup), default=None)
    return render(request, "leaderboard.html", viewer=viewer, board=board, best=best,
                  assignment_names=list(MANIFESTS))


def _attachment(filename: str) -> str:
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "_")
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"
