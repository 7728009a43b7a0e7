"""Assignments: their settings (dates, late policy, limits, leaderboard visibility, points),
students' extensions, the final ranking run, and the grade exports."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status
from fastapi.responses import Response
from sqlalchemy.orm import Session

from api.bodies import CSV_OPENAPI, CsvBody
from api.deps import (
    CurrentPrincipal,
    InstructorOnly,
    NowDep,
    SessionDep,
    SettingsDep,
    StaffOnly,
)
from api.params import AssignmentName, StudentId
from api.presenters import extension_read, grading_finished
from api.schemas import (
    AssignmentList,
    AssignmentRead,
    AssignmentUpdate,
    ErrorResponse,
    ExtensionGrant,
    ExtensionList,
    ExtensionRead,
    FinalRunRead,
    FinalRunRow,
)
from api.views import assignment_view
from grader.manifest import MANIFESTS
from submissions import (
    exports,
    extensions,
    final_runs,
    grades,
    repository,
    service,
    standings,
)
from submissions.models import Extension, FinalRun, Grading

#: The response header naming gradebook rows an LMS cannot match (exports.unmatchable).
EXPORT_WARNING_HEADER = "X-Export-Warning"
_WARNING_HEADERS = {EXPORT_WARNING_HEADER: {
    "description": "present when some rows have no e-mail and no roster id, so an LMS cannot "
                   "match them: how many, and their student ids", "schema": {"type": "string"}}}
ZerosQuery = Annotated[bool, Query(description="give students who never submitted 0 "
                                               "(default: a blank cell, no grade yet)")]

router = APIRouter(prefix="/api/v1/assignments", tags=["assignments"])

_UNKNOWN = {422: {"model": ErrorResponse, "description": "unknown_assignment"}}


@router.get("", response_model=AssignmentList)
def list_assignments(principal: CurrentPrincipal, session: SessionDep, settings: SettingsDep,
                     now: NowDep) -> AssignmentList:
    """Every assignment of the course with its dates, rules and points (students: with
    their own submission count)."""
    return AssignmentList(assignments=[
        assignment_view(session, name=name, principal=principal, settings=settings, now=now)
        for name in MANIFESTS])


@router.get("/{name}", response_model=AssignmentRead, responses=_UNKNOWN)
def read_assignment(name: AssignmentName, principal: CurrentPrincipal, session: SessionDep,
                    settings: SettingsDep, now: NowDep) -> AssignmentRead:
    """One assignment: open and due dates (UTC), late policy, limits, points."""
    return assignment_view(session, name=name, principal=principal, settings=settings, now=now)


@router.patch("/{name}", response_model=AssignmentRead,
              responses={**_UNKNOWN, 403: {"model": ErrorResponse,
                                           "description": "instructor_required"},
                         409: {"model": ErrorResponse, "description": "due_date_in_past"}})
def update_assignment(
    name: AssignmentName, body: AssignmentUpdate, principal: InstructorOnly,
    session: SessionDep, settings: SettingsDep, now: NowDep,
    confirm_past_due: Annotated[bool, Query(
        description="set a due date that has already passed (else 409 due_date_in_past)")] = False,
) -> AssignmentRead:
    """Change settings (instructors). Only the fields sent change; `null` clears a date or
    a limit. A new due date in the past needs `confirm_past_due=true`. Recorded in the
    audit log with the old and new values; lateness and grades follow at once."""
    changes = body.model_dump(exclude_unset=True)
    service.update_assignment(session, name=name, changes=changes, actor=principal.actor, now=now,
                              confirm_past_due=confirm_past_due)
    return assignment_view(session, name=name, principal=principal, settings=settings, now=now)


def _final_run_read(run: FinalRun, gradings: list[Grading]) -> FinalRunRead:
    rows = [
        FinalRunRow(
            student_id=g.submission.student_id, student_name=g.submission.student.name,
            submission_id=g.submission_id, grading_id=g.id, status=g.status,
            headline_speedup=g.headline_speedup, reason=standings.final_run_reason(g),
            disqualified=g.submission.disqualified_at is not None)
        for g in gradings
    ]
    return FinalRunRead(
        id=run.id, assignment=run.assignment, created_at=run.created_at,
        created_by=run.created_by, seed=run.seed, students=len(rows),
        pending=sum(1 for g in gradings if not grading_finished(g)), rows=rows)


@router.post("/{name}/final-run", status_code=status.HTTP_202_ACCEPTED,
             response_model=FinalRunRead,
             responses={**_UNKNOWN, 409: {"model": ErrorResponse, "description":
                        "no_due_date, before_due_date, final_run_in_progress, final_run_empty"}})
def start_final_run(name: AssignmentName, principal: InstructorOnly, session: SessionDep,
                    now: NowDep) -> FinalRunRead:
    """Start the final ranking run (instructors; after the due date): each student's best
    passing on-time submission is re-graded on a fresh secret seed, and the leaderboard
    ranks that run's numbers once it exists. 202: workers grade it; poll
    `GET /api/v1/assignments/{name}/final-run`."""
    run, _count = final_runs.start_final_run(session, assignment=name, actor=principal.actor,
                                             now=now)
    return _final_run_read(run, list(repository.final_run_gradings(session,
                                                                    final_run_id=run.id)))


@router.get("/{name}/final-run", response_model=FinalRunRead,
            responses={**_UNKNOWN, 404: {"model": ErrorResponse,
                                         "description": "final_run_not_found"}})
def read_final_run(name: AssignmentName, _: StaffOnly, session: SessionDep) -> FinalRunRead:
    """The latest final ranking run with each student's outcome (staff; carries the seed)."""
    run, gradings = final_runs.latest(session, assignment=name)
    return _final_run_read(run, list(gradings))


@router.get("/{name}/export/lms", response_class=Response, responses={
    200: {"content": {"text/csv": {}}, "headers": _WARNING_HEADERS,
          "description": "one row per enrolled student: "
          "student_id,name,email,id,submissions,late_submissions,disqualified_submissions,"
          "status,submission_id,correctness_points,speed_points,score,max_score,"
          "ranked_speedup,rank,ranking,reason,late_submission_id,late_score"},
    **_UNKNOWN})
def export_lms(name: AssignmentName, principal: StaffOnly, session: SessionDep,
               now: NowDep, zeros: ZerosQuery = False) -> Response:
    """The gradebook for an LMS (staff): one row per student, with no submission, late or
    disqualified ones included; the score and its parts (docs/course.md). A student who
    never submitted has a blank score unless `zeros`. `X-Export-Warning` names the rows
    an LMS cannot match (no e-mail, no roster id)."""
    text = exports.lms_csv(session, assignment=name, actor=principal.actor, now=now,
                           zeros=zeros)
    return _csv_download(text, f"grades-{name}.csv", session)


# --------------------------------------------------------------------------- extensions


def _extension_read(session, name: str, extension: Extension, now) -> ExtensionRead:  # noqa: ANN001
    rules = grades.rules(session, assignment=name, now=now, student_id=extension.student_id)
    return extension_read(extension, student_name=extension.student.name,
                          due_at=rules.due_for(extension.student_id))


_EXTENSION_ERRORS = {**_UNKNOWN, 403: {"model": ErrorResponse,
                                       "description": "instructor_required"}}


@router.get("/{name}/extensions", response_model=ExtensionList, responses=_UNKNOWN)
def list_extensions(name: AssignmentName, _: StaffOnly, session: SessionDep,
                    now: NowDep) -> ExtensionList:
    """Every student's extension of the assignment, with the due date it puts in force
    (staff)."""
    return ExtensionList(extensions=[
        _extension_read(session, name, e, now)
        for e in extensions.list_extensions(session, assignment=name)])


@router.put("/{name}/extensions/{student_id}", response_model=ExtensionRead,
            responses={**_EXTENSION_ERRORS,
                       404: {"model": ErrorResponse, "description": "student_not_found"}})
def grant_extension(name: AssignmentName, student_id: StudentId, body: ExtensionGrant,
                    principal: InstructorOnly, session: SessionDep,
                    now: NowDep) -> ExtensionRead:
    """Grant or replace a student's extension (instructors): a new due date, or extra days
    past the class-wide one, and the reason. Lateness and grades of the student's uploads
    are derived again everywhere at once. Audited (old and new terms)."""
    extension = extensions.grant(
        session, assignment=name, student_id=student_id,
        terms=extensions.ExtensionTerms(due_at=body.due_at, extra_days=body.extra_days,
                                        reason=body.reason),
        actor=principal.actor, now=now)
    return _extension_read(session, name, extension, now)


@router.delete("/{name}/extensions/{student_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses={**_EXTENSION_ERRORS,
                          404: {"model": ErrorResponse, "description": "extension_not_found"}})
def revoke_extension(name: AssignmentName, student_id: StudentId, principal: InstructorOnly,
                     session: SessionDep, now: NowDep) -> Response:
    """Revoke a student's extension (instructors); the class-wide due date applies to them
    again. Audited."""
    extensions.revoke(session, assignment=name, student_id=student_id, actor=principal.actor,
                      now=now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{name}/extensions/import", response_model=ExtensionList,
             openapi_extra=CSV_OPENAPI,
             responses={**_EXTENSION_ERRORS, 422: {
                 "model": ErrorResponse, "description": "extensions_csv_invalid: nothing "
                 "changed; `errors` lists every problem with its line"}})
def import_extensions(name: AssignmentName, text: CsvBody, principal: InstructorOnly,
                      session: SessionDep, now: NowDep) -> ExtensionList:
    """Grant a class's accommodations from a CSV (instructors): columns `student_id`,
    `email`, `id` or `name` (the student), `due_at` or `extra_days`, `reason`. All or
    nothing."""
    granted = extensions.import_csv(session, assignment=name, text=text,
                                    actor=principal.actor, now=now)
    return ExtensionList(extensions=[_extension_read(session, name, e, now) for e in granted])


# ------------------------------------------------------------------ course-wide exports


def _csv_download(text: str, filename: str, session: Session) -> Response:
    """A gradebook CSV download, with ``X-Export-Warning`` when some rows cannot be matched
    by an LMS (exports.unmatchable)."""
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    warning = exports.unmatchable_warning(exports.unmatchable(session))
    if warning:
        headers[EXPORT_WARNING_HEADER] = warning
    return Response(text, media_type="text/csv; charset=utf-8", headers=headers)


@router.get("/export/canvas", response_class=Response, responses={
    200: {"content": {"text/csv": {}}, "headers": _WARNING_HEADERS,
          "description": "Student,ID,SIS User ID,SIS Login ID,"
          "Section, then one column per assignment; the second row is Points Possible"}})
def export_canvas(principal: StaffOnly, session: SessionDep, now: NowDep,
                  zeros: ZerosQuery = False) -> Response:
    """Every assignment's grade in one CSV for Canvas's gradebook import (staff; audited);
    blank for a student who never submitted unless `zeros`."""
    return _csv_download(exports.canvas_csv(session, actor=principal.actor, now=now,
                                            zeros=zeros), "grades-canvas.csv", session)


@router.get("/export/moodle", response_class=Response, responses={
    200: {"content": {"text/csv": {}}, "headers": _WARNING_HEADERS,
          "description": "Full name,Email address,ID number, "
          "then NAME (Real) and Feedback: NAME per assignment"}})
def export_moodle(principal: StaffOnly, session: SessionDep, now: NowDep,
                  zeros: ZerosQuery = False) -> Response:
    """Every assignment's grade in one CSV for Moodle's grade import (staff; audited);
    blank for a student who never submitted unless `zeros`."""
    return _csv_download(exports.moodle_csv(session, actor=principal.actor, now=now,
                                            zeros=zeros), "grades-moodle.csv", session)


@router.get("/{name}/export/gradescope", response_model=exports.GradescopeClassExport,
            responses=_UNKNOWN)
def export_gradescope_class(name: AssignmentName, principal: StaffOnly, session: SessionDep,
                            now: NowDep) -> exports.GradescopeClassExport:
    """Every enrolled student's Gradescope results.json for the assignment: that of the
    submission their grade comes from (staff; audited)."""
    return exports.gradescope_class(session, assignment=name, actor=principal.actor, now=now)
