"""Staff pages (TAs and instructors, by the API's role rules): students and their
submissions, disqualify/restore, regrades with a preview, assignment settings (instructors
change them), exports (LMS CSV, Gradescope JSON) and the audit log. Each calls the service
function the API route calls; every change is a POST form with the session's CSRF token."""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from api.deps import NowDep, SessionDep, SettingsDep
from api.pages.rendering import CONFIRM_FIELD, PageRoute, confirm_page, redirect, render
from api.pages.routes.student import MAX_DB_INT, SubmissionId
from api.pages.security import CheckedForm, FormFields, InstructorViewer, StaffViewer
from api.presenters import regrade_read, regrade_summary, score_read, student_read
from api.routes.assignments import EXPORT_WARNING_HEADER
from api.schemas import AssignmentUpdate, DisqualifyRequest, RegradeCreate, RestoreRequest
from api.views import assignment_view, submission_summaries
from grader.manifest import MANIFESTS
from submissions import (
    assignments,
    exports,
    moderation,
    regrades,
    repository,
    service,
    slip_days,
    standings,
)
from submissions.errors import DomainError, StudentNotFound

router = APIRouter(route_class=PageRoute, include_in_schema=False, tags=["pages"])

AUDIT_PAGE_SIZE = 100


class FormInvalid(DomainError):
    """A page form whose values the API's schema refuses (the API would answer 422
    validation_error)."""

    code = "validation_error"
    http_status = 422


def validated(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """`data` validated by the API's request schema `model`. Raises FormInvalid."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'form'}: {e['msg']}"
                             for e in exc.errors())
        raise FormInvalid(problems) from None


def _optional_int(form: FormFields, name: str) -> int | str | None:
    text = form.first(name).strip()
    if not text:
        return None
    return int(text) if text.isdigit() else text  # the schema says why a non-number is wrong


# ---------------------------------------------------------------------------- students


@router.get("/staff/students")
def read_students(request: Request, viewer: StaffViewer, session: SessionDep, now: NowDep,
                  assignment: Annotated[str | None, Query(max_length=100)] = None) -> Response:
    """Every student with their standing in one assignment (submitted or not, grade,
    lateness, extension: the board of submissions/standings.py); instructors add students
    and import a roster here (api/pages/routes/term.py)."""
    return roster_page(request, viewer, session, now=now, assignment=assignment)


def lms_roster(session: Any) -> dict[str, Any]:
    """The LMS's side of the roster page: each course's last roster sync (what changed) and
    the students every LMS course lists as dropped (api/lti_schemas.py)."""
    from api.lti_schemas import dropped_student_ids, lti_status  # noqa: PLC0415

    return {"lms_contexts": lti_status(session).contexts,
            "lms_dropped": dropped_student_ids(session)}


def roster_page(request: Request, viewer: Any, session: Any, *, now: dt.datetime,
                assignment: str | None, error: DomainError | None = None,
                roster_text: str = "", imported: dict[str, Any] | None = None,
                headers: dict[str, str] | None = None) -> Response:
    """The roster page (with a refused import's `error` and text, or what an import just
    did, `imported`: its row count, created and existing students, the tokens CSV)."""
    board = standings.board(session, assignment=assignment or next(iter(MANIFESTS)), now=now)
    rows = []
    for student in repository.list_students(session):
        standing = board.of_student(student.id)
        extension = board.rules.extension_of(student.id)
        rows.append({"student": student_read(student), "standing": standing,
                     "grade": score_read(standing.grade) if standing else None,
                     "due_at": board.rules.due_for(student.id), "extension": extension})
    return render(request, "students.html", viewer=viewer,
                  status_code=error.http_status if error else 200, rows=rows,
                  assignment=board.assignment.name, assignment_names=list(MANIFESTS),
                  phase=board.phase, error=error, roster_text=roster_text, imported=imported,
                  headers=headers, **lms_roster(session))


@router.get("/staff/students/{student_id}")
def read_student(request: Request, student_id: Annotated[int, Path(ge=1, le=MAX_DB_INT)],
                 viewer: StaffViewer, session: SessionDep, now: NowDep) -> Response:
    """One student and all their submissions, newest first."""
    student = repository.get_student(session, student_id=student_id)
    if student is None:
        raise StudentNotFound(f"no student {student_id}")
    rows = submission_summaries(session, student_id=student_id, assignment=None, status=None,
                                limit=500, offset=0, now=now)
    return render(request, "student.html", viewer=viewer, student=student_read(student),
                  rows=rows, slip=slip_days.account(session, student_id=student_id),
                  done=request.query_params.get("done"), error=None)


@router.post("/staff/students/{student_id}/slip-days")
def set_slip_days(request: Request, student_id: Annotated[int, Path(ge=1, le=MAX_DB_INT)],
                  viewer: InstructorViewer, checked: CheckedForm, session: SessionDep,
                  now: NowDep) -> Response:
    """Set the student's slip-day budget (slip_days.set_budget: audited, re-derived)."""
    _, form = checked
    try:
        days = int(form.first("days").strip())
    except ValueError:
        days = -1
    try:
        slip_days.set_budget(session, student_id=student_id, days=days,
                             reason=form.first("reason"), actor=viewer.principal.actor, now=now)
    except DomainError as exc:
        session.rollback()
        student = repository.get_student(session, student_id=student_id)
        if student is None:
            raise
        rows = submission_summaries(session, student_id=student_id, assignment=None,
                                    status=None, limit=500, offset=0, now=now)
        return render(request, "student.html", viewer=viewer, status_code=exc.http_status,
                      student=student_read(student), rows=rows,
                      slip=slip_days.account(session, student_id=student_id), done=None,
                      error=exc)
    return redirect(f"/staff/students/{student_id}?done=slip_days")


# ----------------------------------------------------------------------- disqualification


@router.post("/submissions/{submission_id}/disqualify")
def disqualify(submission_id: SubmissionId, viewer: StaffViewer, checked: CheckedForm,
               session: SessionDep, now: NowDep) -> Response:
    """Disqualify with a reason the student reads (moderation.disqualify, audited)."""
    _, form = checked
    body = validated(DisqualifyRequest, {"reason": form.first("reason").strip()})
    moderation.disqualify(session, submission_id=submission_id, reason=body.reason,
                          actor=viewer.principal.actor, now=now)
    return redirect(f"/submissions/{submission_id}?done=disqualified")


@router.post("/submissions/{submission_id}/restore")
def restore(submission_id: SubmissionId, viewer: StaffViewer, checked: CheckedForm,
            session: SessionDep, now: NowDep) -> Response:
    """Lift a disqualification, with an optional reason for the audit log."""
    _, form = checked
    body = validated(RestoreRequest, {"reason": form.first("reason").strip() or None})
    moderation.restore(session, submission_id=submission_id, reason=body.reason,
                       actor=viewer.principal.actor, now=now)
    return redirect(f"/submissions/{submission_id}?done=restored")


# ------------------------------------------------------------------------------ regrades


@router.get("/staff/regrades")
def read_regrades(request: Request, viewer: StaffViewer, session: SessionDep) -> Response:
    """The batches, newest first, and the form to start one."""
    batches = [regrade_summary(b) for b in regrades.list_batches(
        session, assignment=None, limit=100, offset=0)]
    return render(request, "regrades.html", viewer=viewer, batches=batches,
                  assignment_names=list(MANIFESTS))


@router.post("/staff/regrades")
def create_regrade(viewer: StaffViewer, checked: CheckedForm, session: SessionDep,
                   now: NowDep) -> Response:
    """Queue a regrade of the chosen submissions (regrades.create_regrade), then its preview."""
    _, form = checked
    ids_text = form.first("submission_ids").replace(",", " ").split()
    body = validated(RegradeCreate, {
        "assignment": form.first("assignment"),
        "status": form.first("status") or None,
        "student_id": _optional_int(form, "student_id"),
        "grader_version": form.first("grader_version").strip() or None,
        "submission_ids": [int(i) if i.isdigit() else i for i in ids_text] or None,
    })
    selection = regrades.RegradeSelection(
        assignment=body.assignment, student_id=body.student_id, status=body.status,
        grader_version=body.grader_version,
        submission_ids=None if body.submission_ids is None else tuple(body.submission_ids))
    batch, busy = regrades.create_regrade(session, selection=selection,
                                          actor=viewer.principal.actor, now=now)
    return redirect(f"/staff/regrades/{batch.id}?left_out_busy={busy}")


@router.get("/staff/regrades/{regrade_id}")
def read_regrade(request: Request, regrade_id: Annotated[int, Path(ge=1, le=MAX_DB_INT)],
                 viewer: StaffViewer, session: SessionDep, now: NowDep,
                 left_out_busy: Annotated[int | None, Query(ge=0)] = None,
                 done: str | None = None,
                 applied: Annotated[int | None, Query(ge=0, le=MAX_DB_INT)] = None,
                 unchanged: Annotated[int | None, Query(ge=0, le=MAX_DB_INT)] = None,
                 ) -> Response:
    """The preview: old and new grading side by side; apply or discard once decided (and,
    after applying, how many submissions it changed)."""
    preview = regrades.preview(session, batch_id=regrade_id)
    return render(request, "regrade.html", viewer=viewer,
                  batch=regrade_read(preview, left_out_busy=left_out_busy), done=done,
                  applied=applied, unchanged=unchanged)


@router.post("/staff/regrades/{regrade_id}/apply")
def apply_regrade(request: Request, regrade_id: Annotated[int, Path(ge=1, le=MAX_DB_INT)],
                  viewer: StaffViewer, checked: CheckedForm, session: SessionDep,
                  now: NowDep) -> Response:
    """Make the new gradings current (409 regrade_pending while any is unfinished), once
    confirmed: the first POST answers a page saying how many submissions and students
    change."""
    _, form = checked
    if form.first(CONFIRM_FIELD) != "yes":
        before = regrades.plan_apply(session, batch_id=regrade_id)
        applicable = [c for c in before.comparisons if c.applicable]
        students = {c.submission.student_id for c in applicable}
        return confirm_page(
            request, viewer, title=f"Apply regrade #{regrade_id}", students=len(students),
            changes=[f"make the new grading current for {len(applicable)} of "
                     f"{len(before.comparisons)} submission(s) of {before.batch.assignment} "
                     "(the others keep their grading: an infrastructure error)",
                     f"change the verdict or score of {before.changed} of them: scores, the "
                     "leaderboard and every export follow the new gradings",
                     "the old gradings stay in each submission's history, no longer counting"],
            action=f"/staff/regrades/{regrade_id}/apply", button=f"Apply regrade #{regrade_id}",
            back=f"/staff/regrades/{regrade_id}")
    after, unchanged = regrades.apply(session, batch_id=regrade_id,
                                      actor=viewer.principal.actor, now=now)
    applied = sum(1 for c in after.comparisons if c.applied)
    return redirect(f"/staff/regrades/{regrade_id}?done=applied&applied={applied}"
                    f"&unchanged={len(unchanged)}")


@router.post("/staff/regrades/{regrade_id}/discard")
def discard_regrade(regrade_id: Annotated[int, Path(ge=1, le=MAX_DB_INT)],
                    viewer: StaffViewer, checked: CheckedForm, session: SessionDep,
                    now: NowDep) -> Response:
    """Close the batch without applying it."""
    regrades.discard(session, batch_id=regrade_id, actor=viewer.principal.actor, now=now)
    return redirect(f"/staff/regrades/{regrade_id}?done=discarded")


# -------------------------------------------------------------------- assignment settings


@router.get("/staff/assignments/{name}")
def read_settings(request: Request, name: Annotated[str, Path(max_length=100)],
                  viewer: StaffViewer, session: SessionDep, settings: SettingsDep,
                  now: NowDep, done: str | None = None) -> Response:
    """An assignment's rules; instructors get the form that changes them."""
    current = assignment_view(session, name=name, principal=viewer.principal,
                              settings=settings, now=now)
    row = assignments.load(session, name=name, now=now)
    return render(request, "settings.html", viewer=viewer, assignment=current,
                  values=_form_values(row), done=done, error=None)



def _datetime_local(moment: dt.datetime | None) -> str:
    return "" if moment is None else moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M")


def _form_values(row: Any) -> dict[str, str]:
    return {
        "opens_at": _datetime_local(row.opens_at), "due_at": _datetime_local(row.due_at),
        "late_policy": row.late_policy,
        "max_submissions": "" if row.max_submissions is None else str(row.max_submissions),
        "rate_limit_submissions": "" if row.rate_limit_submissions is None
        else str(row.rate_limit_submissions),
        "rate_limit_window_s": "" if row.rate_limit_window_s is None
        else f"{row.rate_limit_window_s:g}",
        "leaderboard_visible": "on" if row.leaderboard_visible else "",
        "correctness_points": f"{row.correctness_points:g}",
        "speed_points": ", ".join(f"{t['min_speedup']:g}:{t['points']:g}"
                                  for t in row.speed_points or []),
        "counting": row.counting,
        "late_percent": "" if row.late_percent is None else f"{row.late_percent:g}",
        "late_unit": row.late_unit or "",
        "late_cap": "" if row.late_cap is None else f"{row.late_cap:g}",
        "late_after_cap": row.late_after_cap,
        "check_points": ", ".join(f"{name}:{points:g}"
                                  for name, points in (row.check_points or {}).items()),
    }


#: Course-policy fields a form may leave out (an older page, a script): absent means unchanged.
_OPTIONAL_FIELDS = ("counting", "late_percent", "late_unit", "late_cap", "late_after_cap",
                    "check_points")


def _parse_check_points(text: str) -> dict[str, str] | str | None:
    """``name:points, ...`` -> {name: points} (the schema checks the numbers); empty: None
    (the assignment folder's points)."""
    points = {}
    for item in text.replace(";", ",").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition(":")
        if not sep:
            return item
        points[name.strip()] = value.strip()
    return points or None


def _normalised(key: str, text: str) -> str:
    """A sent value written as `_form_values` writes the stored one (``1.0`` as ``1``,
    ``23:59:00`` as ``23:59``), so that only real changes are sent; unreadable text is
    returned as it is (it differs, and the schema says why)."""
    text = text.strip()
    try:
        if key in ("opens_at", "due_at") and text:
            moment = dt.datetime.fromisoformat(text.removesuffix("Z"))
            return moment.strftime("%Y-%m-%dT%H:%M")
        if key in ("rate_limit_window_s", "correctness_points", "late_percent",
                   "late_cap") and text:
            return f"{float(text):g}"
        if key == "check_points":
            points = _parse_check_points(text)
            if isinstance(points, dict):
                return ", ".join(f"{name}:{float(value):g}" for name, value in points.items())
        if key == "speed_points":
            thresholds = _parse_thresholds(text)
            if isinstance(thresholds, list):
                return ", ".join(f"{float(t['min_speedup']):g}:{float(t['points']):g}"
                                 for t in thresholds)
    except ValueError:
        pass
    return text


def _parse_time(text: str) -> str | None:
    """A ``datetime-local`` value, read as UTC (the form says so)."""
    text = text.strip()
    if not text:
        return None
    return text if text.endswith("Z") or "+" in text[10:] else f"{text}Z"


def _parse_thresholds(text: str) -> list[dict[str, str]] | str:
    thresholds = []
    for item in text.replace(";", ",").split(","):
        if not item.strip():
            continue
        speed, sep, award = item.partition(":")
        if not sep:
            return item  # the schema refuses it with a message naming the item
        thresholds.append({"min_speedup": speed.strip().rstrip("x×"), "points": award.strip()})
    return thresholds


@router.post("/staff/assignments/{name}")
def update_settings(request: Request, name: Annotated[str, Path(max_length=100)],
                    viewer: InstructorViewer, checked: CheckedForm, session: SessionDep,
                    settings: SettingsDep, now: NowDep) -> Response:
    """Change the settings that differ from the stored ones (service.update_assignment, audited
    with the old and new values), validated by the API's AssignmentUpdate schema."""
    _, form = checked
    row = assignments.load(session, name=name, now=now)
    before = _form_values(row)
    sent = {key: form.first(key, default=before[key] if key in _OPTIONAL_FIELDS else "")
            for key in before}
    sent["leaderboard_visible"] = "on" if form.first("leaderboard_visible") else ""
    changed = {key for key in before if _normalised(key, sent[key]) != before[key]}
    raw: dict[str, Any] = {}
    for key in changed:
        text = sent[key].strip()
        if key in ("opens_at", "due_at"):
            raw[key] = _parse_time(text)
        elif key == "leaderboard_visible":
            raw[key] = bool(text)
        elif key == "speed_points":
            raw[key] = _parse_thresholds(text)
        elif key == "check_points":
            raw[key] = _parse_check_points(text)
        elif key in ("late_policy", "counting", "late_after_cap"):
            raw[key] = text
        else:
            raw[key] = text or None
    try:
        body = validated(AssignmentUpdate, raw)
        if changed:
            service.update_assignment(session, name=name, changes=body.model_dump(exclude_unset=True),
                                      actor=viewer.principal.actor, now=now,
                                      confirm_past_due=bool(form.first("confirm_past_due")))
    except DomainError as exc:
        session.rollback()
        current = assignment_view(session, name=name, principal=viewer.principal,
                                  settings=settings, now=now)
        return render(request, "settings.html", viewer=viewer, status_code=exc.http_status,
                      assignment=current, values={**before, **sent}, done=None, error=exc)
    return redirect(f"/staff/assignments/{name}?done={'saved' if changed else 'unchanged'}")


# ------------------------------------------------------------------------------- exports


@router.get("/staff/exports")
def read_exports(request: Request, viewer: StaffViewer, session: SessionDep) -> Response:
    """Download the LMS gradebook (CSV) or a submission's Gradescope results.json; the
    students an LMS cannot match (no e-mail, no roster id) are listed first."""
    return render(request, "exports.html", viewer=viewer, assignment_names=list(MANIFESTS),
                  unmatchable=exports.unmatchable(session))


def gradebook_download(text: str, filename: str, session: Any) -> Response:
    """A gradebook CSV from a page form (never cached), with the API's ``X-Export-Warning``
    when an LMS cannot match some rows (the exports page lists them)."""
    headers = {"Content-Disposition": f'attachment; filename="{filename}"',
               "Cache-Control": "no-store"}
    warning = exports.unmatchable_warning(exports.unmatchable(session))
    if warning:
        headers[EXPORT_WARNING_HEADER] = warning
    return Response(text, media_type="text/csv; charset=utf-8", headers=headers)


@router.post("/staff/exports/lms")
def export_lms(viewer: StaffViewer, checked: CheckedForm, session: SessionDep,
               now: NowDep) -> Response:
    """The LMS gradebook CSV (exports.lms_csv; audited). A POST: exporting is audited, and
    no GET may change anything."""
    _, form = checked
    name = assignments.resolve_manifest(form.first("assignment")).name
    text = exports.lms_csv(session, assignment=name, actor=viewer.principal.actor, now=now,
                           zeros=bool(form.first("zeros")))
    return gradebook_download(text, f"grades-{name}.csv", session)


@router.post("/staff/exports/gradescope")
def export_gradescope(viewer: StaffViewer, checked: CheckedForm, session: SessionDep,
                      now: NowDep) -> Response:
    """A submission's Gradescope results.json (exports.gradescope_results; audited)."""
    _, form = checked
    submission_id = _optional_int(form, "submission_id")
    if not isinstance(submission_id, int) or not 1 <= submission_id <= MAX_DB_INT:
        raise FormInvalid("submission_id: give a submission number")
    submission = service.get_visible_submission(session, submission_id=submission_id,
                                                viewer_student_id=None)
    results = exports.gradescope_results(session, submission=submission,
                                         actor=viewer.principal.actor, now=now)
    return Response(results.model_dump_json(indent=2), media_type="application/json",
                    headers={"Content-Disposition":
                             f'attachment; filename="results-{submission_id}.json"',
                             "Cache-Control": "no-store"})


# ---------------------------------------------------------------------------- audit log


@router.get("/staff/audit")
def read_audit(request: Request, viewer: StaffViewer, session: SessionDep,
               action: Annotated[str | None, Query(max_length=64)] = None,
               assignment: Annotated[str | None, Query(max_length=100)] = None,
               target_type: Annotated[str | None, Query(max_length=32)] = None,
               target_id: Annotated[str | None, Query(max_length=100)] = None,
               offset: Annotated[int, Query(ge=0, le=MAX_DB_INT)] = 0) -> Response:
    """Who did what, when (GET /api/v1/audit), newest first, with its filters."""
    filters = {"action": action or None, "assignment": assignment or None,
               "target_type": target_type or None, "target_id": target_id or None}
    events = repository.list_audit_events(session, limit=AUDIT_PAGE_SIZE + 1, offset=offset,
                                          **filters)
    rows = [{"event": e, "details": json.dumps(e.details, sort_keys=True, ensure_ascii=False)
             if e.details else ""} for e in events[:AUDIT_PAGE_SIZE]]
    return render(request, "audit.html", viewer=viewer, rows=rows,
                  more=len(events) > AUDIT_PAGE_SIZE, offset=offset, page_size=AUDIT_PAGE_SIZE,
                  filters={k: v or "" for k, v in filters.items()})
