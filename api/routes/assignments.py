"""Assignments: their settings (dates, late policy, limits, leaderboard visibility, points),
the final ranking run, and the LMS grade export."""

from __future__ import annotations

from fastapi import APIRouter, status
from fastapi.responses import Response

from api.deps import (
    CurrentPrincipal,
    InstructorOnly,
    NowDep,
    SessionDep,
    SettingsDep,
    StaffOnly,
)
from api.params import AssignmentName
from api.presenters import grading_finished
from api.schemas import (
    AssignmentList,
    AssignmentRead,
    AssignmentUpdate,
    ErrorResponse,
    FinalRunRead,
    FinalRunRow,
)
from api.views import assignment_view
from grader.manifest import MANIFESTS
from submissions import assignments, exports, final_runs, repository, standings
from submissions.models import FinalRun, Grading

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
                                           "description": "instructor_required"}})
def update_assignment(name: AssignmentName, body: AssignmentUpdate, principal: InstructorOnly,
                      session: SessionDep, settings: SettingsDep, now: NowDep) -> AssignmentRead:
    """Change settings (instructors). Only the fields sent change; `null` clears a date or
    a limit. Recorded in the audit log with the old and new values."""
    changes = body.model_dump(exclude_unset=True)
    assignments.update(session, name=name, changes=changes, actor=principal.actor, now=now)
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
    200: {"content": {"text/csv": {}}, "description": "one row per enrolled student: "
          "student_id,name,email,id,submissions,late_submissions,disqualified_submissions,"
          "status,submission_id,correctness_points,speed_points,score,max_score,"
          "ranked_speedup,rank,ranking,reason,late_submission_id,late_score"},
    **_UNKNOWN})
def export_lms(name: AssignmentName, principal: StaffOnly, session: SessionDep,
               now: NowDep) -> Response:
    """The gradebook for an LMS (staff): one row per student, with no submission, late or
    disqualified ones included; the score and its parts (docs/course.md)."""
    text = exports.lms_csv(session, assignment=name, actor=principal.actor, now=now)
    return Response(text, media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="grades-{name}.csv"'})
