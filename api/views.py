"""Read models for one viewer, shared by the API routes (api/routes/) and the web pages
(api/pages/): each composes the service calls and presenters of one answer, so the JSON and
the page show the same thing under the same rules (who may see what, anonymisation, quotas).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from api.deps import Principal
from api.presenters import assignment_read, grading_finished, score_read, submission_summary
from api.schemas import (
    AssignmentRead,
    FinalRunProgress,
    Leaderboard,
    LeaderboardRow,
    Quota,
    SubmissionSummary,
)
from submissions import assignments, grades, repository, slip_days, standings
from submissions.errors import LeaderboardHidden
from submissions.lateness import describe_duration, is_late, late_by
from submissions.settings import Settings


def assignment_view(session: Session, *, name: str, principal: Principal, settings: Settings,
                    now: dt.datetime) -> AssignmentRead:
    """The assignment as `principal` sees it (students: with their own quota).

    Raises:
        UnknownAssignment: not in the manifest.
    """
    rules = grades.rules(session, assignment=name, now=now, student_id=principal.student_id)
    row = rules.assignment
    limit = assignments.rate_limit(row, settings)
    run = repository.latest_final_run(session, assignment=row.name)
    gradings = [] if run is None else repository.final_run_gradings(session, final_run_id=run.id)
    graded = sum(grading_finished(g) for g in gradings)
    finished = run is not None and graded == len(gradings)
    quota = None
    if principal.student is not None:
        used, left = assignments.submissions_used(session, row=row,
                                                  student_id=principal.student.id)
        held = slip_days.account(session, student_id=principal.student.id)
        due = rules.due_for(principal.student.id)
        quota = Quota(submissions_used=used, submissions_left=left, due_at=due,
                      extension=rules.extension_of(principal.student.id) is not None,
                      slip_days_budget=held.budget,
                      slip_days_left=held.left + held.spent.get(row.name, (0, 0))[1],
                      slip_days_spent=held.spent.get(row.name, (0, 0))[1],
                      late_now=f"{describe_duration(late_by(now, due))} late"
                      if is_late(now, due) else None)
    return assignment_read(
        row, policy=rules.policy, rate_limit=(limit.submissions, limit.window_s),
        final_run=run, final_run_finished=finished, quota=quota,
        staff_view=principal.is_staff, now=now, final_run_graded=graded,
        final_run_total=len(gradings))


def leaderboard_view(session: Session, *, assignment: str, principal: Principal,
                     now: dt.datetime) -> Leaderboard:
    """The board as `principal` may see it. Staff see every row with names; a student sees
    an anonymised board (other students' names, ids, submission ids, times and scores left
    out; their unranked rows not listed) with their own row marked.

    Raises:
        UnknownAssignment: not in the manifest.
        LeaderboardHidden: a student, and staff hid the board.
    """
    board = standings.board(session, assignment=assignment, now=now)
    if not principal.is_staff and not board.assignment.leaderboard_visible:
        raise LeaderboardHidden(f"the {assignment} leaderboard is not visible to students")
    rows = []
    for standing in board.standings:
        is_you = standing.student_id == principal.student_id
        visible = principal.is_staff or is_you
        if not visible and standing.rank is None:
            continue  # other students' unranked rows say nothing to a student
        rows.append(
            LeaderboardRow(
                rank=standing.rank,
                is_you=is_you,
                student_id=standing.student_id if visible else None,
                student_name=standing.student_name if visible else None,
                submission_id=standing.submission_id if visible else None,
                headline_speedup=standing.headline_speedup,
                device=standing.device,
                submitted_at=standing.submitted_at if visible else None,
                reason=standing.reason if visible else None,
                score=score_read(standing.grade) if visible else None,
                graded_submission_id=standing.graded_submission_id if visible else None,
            )
        )
    running = board.running
    return Leaderboard(assignment=board.assignment.name, phase=board.phase,
                       final_run_id=board.final_run.id if board.final_run else None,
                       final_run_running=None if running is None else FinalRunProgress(
                           id=running.run.id, graded=running.graded, total=running.total),
                       rows=rows)


def submission_summaries(session: Session, *, student_id: int | None, assignment: str | None,
                         status: str | None, limit: int, offset: int,
                         now: dt.datetime) -> list[SubmissionSummary]:
    """Submissions newest first (one student's, or everyone's with ``student_id=None``),
    each with its score under its assignment's points.

    Raises:
        UnknownAssignment: `assignment` is not in the manifest.
    """
    if assignment is not None:
        assignments.resolve_manifest(assignment)
    rows = repository.list_submissions(session, student_id=student_id, limit=limit,
                                       offset=offset, assignment=assignment, status=status)
    rules: dict[str, grades.AssignmentRules] = {}
    for row in rows:
        if row.assignment not in rules:
            rules[row.assignment] = grades.rules(session, assignment=row.assignment, now=now,
                                                 student_id=student_id)
    return [submission_summary(s, rules[s.assignment]) for s in rows]
