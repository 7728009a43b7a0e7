"""Staff pages for a term's work (instructors change, TAs read): the roster (add one
student, import a roster CSV with the tokens downloaded once, token rotation), staff
accounts, students' extensions, the final ranking run, and the course-wide exports. Each
calls the service function its API route calls; every change is a POST form with the
session's CSRF token; a page showing a new token is never cached."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from api.deps import NowDep, SessionDep
from api.pages.rendering import CONFIRM_FIELD, PageRoute, confirm_page, redirect, render
from api.pages.routes.staff import FormInvalid, gradebook_download, roster_page, validated
from api.pages.routes.student import MAX_DB_INT
from api.pages.security import CheckedForm, InstructorViewer, StaffViewer
from api.presenters import extension_read
from api.schemas import ExtensionGrant, StaffCreate, StudentCreate
from grader.manifest import MANIFESTS
from submissions import (
    assignments,
    exports,
    extensions,
    final_runs,
    grades,
    repository,
    roster,
    service,
    staff,
)
from submissions.errors import DomainError, StaffNotFound, StudentNotFound
from submissions.models import StaffRole

router = APIRouter(route_class=PageRoute, include_in_schema=False, tags=["pages"])

NO_STORE = {"Cache-Control": "no-store"}
Id = Annotated[int, Path(ge=1, le=MAX_DB_INT)]
Name = Annotated[str, Path(max_length=100)]


def _token_page(request: Request, viewer, *, kind: str, name: str, token: str,  # noqa: ANN001
                back: str) -> Response:
    return render(request, "token.html", viewer=viewer, headers=NO_STORE, kind=kind,
                  name=name, token=token, back=back)


# ------------------------------------------------------------------------------- roster


@router.post("/staff/students")
def add_student(request: Request, viewer: InstructorViewer, checked: CheckedForm,
                session: SessionDep, now: NowDep) -> Response:
    """Create one student (service.create_student, audited); their token, shown once."""
    _, form = checked
    body = validated(StudentCreate, {"name": form.first("name"),
                                     "email": form.first("email").strip() or None,
                                     "external_id": form.first("external_id").strip() or None})
    created = service.create_student(session, name=body.name, email=body.email,
                                     external_id=body.external_id, now=now,
                                     actor=viewer.principal.actor)
    return _token_page(request, viewer, kind="student", name=created.student.name,
                       token=created.token, back="/staff/students")


@router.post("/staff/students/import")
def import_roster(request: Request, viewer: InstructorViewer, checked: CheckedForm,
                  session: SessionDep, now: NowDep) -> Response:
    """Import a roster CSV pasted in the form (roster.import_roster, all or nothing). The
    answer is the roster page again: what the import did (imported N: created, already
    enrolled), the new table, an empty box, and the new students' tokens, shown once
    (never stored) with their ``tokens.csv`` download; a bad roster shows the page with
    every problem and the text kept."""
    _, form = checked
    try:
        imported = roster.import_roster(session, text=form.first("roster"),
                                        actor=viewer.principal.actor, now=now)
    except DomainError as exc:
        session.rollback()
        return roster_page(request, viewer, session, now=now, assignment=None,
                           error=exc, roster_text=form.first("roster"))
    created = [i for i in imported if i.created]
    return roster_page(request, viewer, session, now=now, assignment=None, headers=NO_STORE,
                       imported={"rows": len(imported), "created": created,
                                 "existing": [i for i in imported if not i.created],
                                 "tokens_csv": roster.tokens_csv(created) if created else ""})


@router.post("/staff/students/{student_id}/token")
def rotate_student_token(request: Request, student_id: Id, viewer: InstructorViewer,
                         checked: CheckedForm, session: SessionDep, now: NowDep) -> Response:
    """A new token for the student (the old one stops working at once; audited), once
    confirmed on the page the first POST answers."""
    _, form = checked
    if form.first(CONFIRM_FIELD) != "yes":
        student = repository.get_student(session, student_id=student_id)
        if student is None:
            raise StudentNotFound(f"no student {student_id}")
        return confirm_page(
            request, viewer, title=f"Rotate {student.name}'s token", students=1,
            changes=[f"stop {student.name}'s current token at once: every browser and "
                     "`grader submit` using it is signed out",
                     "show the new token once, on the next page: hand it to them"],
            action=f"/staff/students/{student_id}/token",
            button=f"Rotate {student.name}'s token now", back=f"/staff/students/{student_id}")
    issued = service.rotate_student_token(session, student_id=student_id,
                                          actor=viewer.principal.actor, now=now)
    return _token_page(request, viewer, kind="student", name=issued.student.name,
                       token=issued.token, back=f"/staff/students/{student_id}")


# ------------------------------------------------------------------------ staff accounts


@router.get("/staff/staff")
def read_staff(request: Request, viewer: StaffViewer, session: SessionDep) -> Response:
    """Every staff account (GET /api/v1/staff); instructors add and rotate."""
    return render(request, "staff.html", viewer=viewer,
                  members=repository.list_staff_members(session))


@router.post("/staff/staff")
def add_staff(request: Request, viewer: InstructorViewer, checked: CheckedForm,
              session: SessionDep, now: NowDep) -> Response:
    """Create a TA or instructor account (audited); its token, shown once."""
    _, form = checked
    body = validated(StaffCreate, {"name": form.first("name"), "role": form.first("role")})
    created = staff.create_staff_member(session, name=body.name, role=StaffRole(body.role),
                                        actor=viewer.principal.actor, now=now)
    return _token_page(request, viewer, kind=created.member.role, name=created.member.name,
                       token=created.token, back="/staff/staff")


@router.post("/staff/staff/{staff_id}/token")
def rotate_staff_token(request: Request, staff_id: Id, viewer: InstructorViewer,
                       checked: CheckedForm, session: SessionDep, now: NowDep) -> Response:
    """A new token for a staff account (also how an account is revoked; audited), once
    confirmed on the page the first POST answers."""
    _, form = checked
    if form.first(CONFIRM_FIELD) != "yes":
        member = repository.get_staff_member(session, staff_id=staff_id)
        if member is None:
            raise StaffNotFound(f"no staff account {staff_id}")
        return confirm_page(
            request, viewer, title=f"Rotate {member.name}'s token", students=1,
            count_label="Staff accounts affected (no student)",
            changes=[f"stop the current token of {member.name} ({member.role}) at once: "
                     "every browser and command using it is signed out",
                     "show the new token once, on the next page"],
            action=f"/staff/staff/{staff_id}/token",
            button=f"Rotate {member.name}'s token now", back="/staff/staff")
    rotated = staff.rotate_staff_token(session, staff_id=staff_id, actor=viewer.principal.actor,
                                       now=now)
    return _token_page(request, viewer, kind=rotated.member.role, name=rotated.member.name,
                       token=rotated.token, back="/staff/staff")


# --------------------------------------------------------------------------- extensions


def _extensions_page(request: Request, viewer, session, *, name: str, now: dt.datetime,  # noqa: ANN001
                     done: str | None = None, error: DomainError | None = None,
                     csv_text: str = "") -> Response:
    rules = grades.rules(session, assignment=name, now=now)
    rows = [extension_read(e, student_name=e.student.name, due_at=rules.due_for(e.student_id))
            for e in extensions.list_extensions(session, assignment=name)]
    return render(request, "extensions.html", viewer=viewer,
                  status_code=error.http_status if error else 200,
                  assignment=rules.assignment, rows=rows, students=repository.list_students(session),
                  assignment_names=list(MANIFESTS), done=done, error=error, csv_text=csv_text)


@router.get("/staff/extensions")
def read_extensions(request: Request, viewer: StaffViewer, session: SessionDep, now: NowDep,
                    assignment: Annotated[str | None, Query(max_length=100)] = None,
                    done: str | None = None) -> Response:
    """An assignment's extensions with each student's due date in force; instructors
    grant, revoke and import them."""
    name = assignment or next(iter(MANIFESTS))
    return _extensions_page(request, viewer, session, name=name, now=now, done=done)


@router.post("/staff/extensions/{name}")
def grant_extension(request: Request, name: Name, viewer: InstructorViewer,
                    checked: CheckedForm, session: SessionDep, now: NowDep) -> Response:
    """Grant or replace one student's extension (extensions.grant, audited)."""
    _, form = checked
    due = form.first("due_at").strip()
    days = form.first("extra_days").strip()
    student = form.first("student_id").strip()
    try:
        body = validated(ExtensionGrant, {
            "due_at": (due if due.endswith("Z") else f"{due}Z") if due else None,
            "extra_days": days or None, "reason": form.first("reason")})
        if not student.isdigit():
            raise FormInvalid("student: choose a student")
        extensions.grant(session, assignment=name, student_id=int(student),
                         terms=extensions.ExtensionTerms(due_at=body.due_at,
                                                         extra_days=body.extra_days,
                                                         reason=body.reason),
                         actor=viewer.principal.actor, now=now)
    except DomainError as exc:
        session.rollback()
        return _extensions_page(request, viewer, session, name=name, now=now, error=exc)
    return redirect(f"/staff/extensions?assignment={name}&done=granted")


@router.post("/staff/extensions/{name}/{student_id}/revoke")
def revoke_extension(name: Name, student_id: Id, viewer: InstructorViewer,
                     checked: CheckedForm, session: SessionDep, now: NowDep) -> Response:
    """Revoke one student's extension (audited)."""
    extensions.revoke(session, assignment=name, student_id=student_id,
                      actor=viewer.principal.actor, now=now)
    return redirect(f"/staff/extensions?assignment={name}&done=revoked")


@router.post("/staff/extensions/{name}/import")
def import_extensions(request: Request, name: Name, viewer: InstructorViewer,
                      checked: CheckedForm, session: SessionDep, now: NowDep) -> Response:
    """Grant a class's accommodations from a pasted CSV (all or nothing; every bad row
    listed)."""
    _, form = checked
    try:
        extensions.import_csv(session, assignment=name, text=form.first("extensions_csv"),
                              actor=viewer.principal.actor, now=now)
    except DomainError as exc:
        session.rollback()
        return _extensions_page(request, viewer, session, name=name, now=now, error=exc,
                                csv_text=form.first("extensions_csv"))
    return redirect(f"/staff/extensions?assignment={name}&done=imported")


# -------------------------------------------------------------------------- final run


@router.post("/staff/assignments/{name}/final-run")
def start_final_run(request: Request, name: Name, viewer: InstructorViewer,
                    checked: CheckedForm, session: SessionDep, now: NowDep) -> Response:
    """Start the final ranking run (final_runs.start_final_run, audited) once confirmed
    (the first POST answers a page saying how many students it re-grades; a run that could
    not start says why there, before anything is asked); then the assignment's page, which
    shows its progress."""
    _, form = checked
    assignment = assignments.resolve_manifest(name).name
    if form.first(CONFIRM_FIELD) != "yes":
        entries = final_runs.plan_final_run(session, assignment=assignment, now=now)
        previous = repository.latest_final_run(session, assignment=assignment)
        changes = [f"re-grade the best passing on-time submission of each of {len(entries)} "
                   f"student(s) of {assignment} on one fresh secret seed (queued behind "
                   "students' uploads)",
                   "rank the leaderboard by that run's numbers once every grading is done "
                   "(the board says final then); a submission that fails there loses its "
                   "rank and keeps its correctness points"]
        if previous is not None:
            changes.append(f"supersede final run #{previous.id} once this one finishes")
        return confirm_page(request, viewer, title=f"Start the final ranking run of {assignment}",
                            students=len(entries), changes=changes,
                            action=f"/staff/assignments/{name}/final-run",
                            button="Start the final ranking run now",
                            back=f"/staff/assignments/{name}#final-run")
    final_runs.start_final_run(session, assignment=assignment,
                               actor=viewer.principal.actor, now=now)
    return redirect(f"/staff/assignments/{name}?done=final_run#final-run")


# ---------------------------------------------------------------------------- exports


@router.post("/staff/exports/canvas")
def export_canvas(viewer: StaffViewer, checked: CheckedForm, session: SessionDep,
                  now: NowDep) -> Response:
    """Every assignment's grades for Canvas's gradebook import (audited); blank for a
    student who never submitted unless the form asks for zeros."""
    _, form = checked
    return gradebook_download(exports.canvas_csv(session, actor=viewer.principal.actor, now=now,
                                                 zeros=bool(form.first("zeros"))),
                              "grades-canvas.csv", session)


@router.post("/staff/exports/moodle")
def export_moodle(viewer: StaffViewer, checked: CheckedForm, session: SessionDep,
                  now: NowDep) -> Response:
    """Every assignment's grades for Moodle's grade import (audited); blank for a student
    who never submitted unless the form asks for zeros."""
    _, form = checked
    return gradebook_download(exports.moodle_csv(session, actor=viewer.principal.actor, now=now,
                                                 zeros=bool(form.first("zeros"))),
                              "grades-moodle.csv", session)


@router.post("/staff/exports/gradescope-class")
def export_gradescope_class(viewer: StaffViewer, checked: CheckedForm, session: SessionDep,
                            now: NowDep) -> Response:
    """Every student's Gradescope results.json of one assignment (audited)."""
    _, form = checked
    name = assignments.resolve_manifest(form.first("assignment")).name
    result = exports.gradescope_class(session, assignment=name, actor=viewer.principal.actor,
                                      now=now)
    return Response(result.model_dump_json(indent=2), media_type="application/json",
                    headers={**NO_STORE, "Content-Disposition":
                             f'attachment; filename="gradescope-{name}.json"'})
