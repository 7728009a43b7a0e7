"""The leaderboard: a query over stored gradings (never a recomputation), provisional until
the final ranking run, then that run's numbers (submissions/standings.py)."""

from __future__ import annotations

import csv
import io
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from api.deps import CurrentPrincipal, NowDep, SessionDep
from api.presenters import score_read
from api.schemas import ErrorResponse, Leaderboard, LeaderboardRow
from grader.manifest import DEFAULT_ASSIGNMENT
from submissions import assignments, standings
from submissions.errors import LeaderboardHidden, StaffRequired

router = APIRouter(prefix="/api/v1/leaderboard", tags=["leaderboard"])

CSV_COLUMNS = ("rank", "student_id", "student_name", "submission_id", "headline_speedup",
               "device", "submitted_at", "score", "reason")


@router.get("", response_model=Leaderboard,
            responses={200: {"content": {"text/csv": {}},
                             "description": "JSON, or CSV with ?format=csv (staff)"},
                       403: {"model": ErrorResponse,
                             "description": "leaderboard_hidden (students), staff_required (csv)"},
                       422: {"model": ErrorResponse, "description": "unknown_assignment"}})
def read_leaderboard(
    principal: CurrentPrincipal,
    session: SessionDep,
    now: NowDep,
    assignment: Annotated[str, Query(max_length=100)] = DEFAULT_ASSIGNMENT,
    format: Annotated[Literal["json", "csv"], Query(description="csv: staff export")] = "json",  # noqa: A002
) -> Leaderboard | Response:
    """Each student's ranked submission (late ones are never ranked; disqualified ones are
    hidden). Provisional: best passing on-time submission by headline speedup (higher
    first; ties: earlier first; passes without a GPU benchmark follow, by time). Final
    (after a final ranking run): that run's numbers; failed or pending ones have no rank and
    say why. Students see an anonymised board (no names, ids or times of others) with their
    own row marked, unless staff hid the board."""
    board = standings.board(session, assignment=assignment, now=now)
    if not principal.is_staff and not board.assignment.leaderboard_visible:
        raise LeaderboardHidden(f"the {assignment} leaderboard is not visible to students")
    if format == "csv" and not principal.is_staff:
        raise StaffRequired("the CSV export is for staff")
    policy = assignments.points_policy(board.assignment)
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
                score=score_read(policy, standing.score) if visible else None,
            )
        )
    if format == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            writer.writerow([
                row.rank or "", row.student_id or "", row.student_name or "",
                row.submission_id or "",
                "" if row.headline_speedup is None else f"{row.headline_speedup:.6g}",
                row.device or "", row.submitted_at.isoformat() if row.submitted_at else "",
                "" if row.score is None else f"{row.score.total:g}", row.reason or "",
            ])
        return Response(
            buffer.getvalue(),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="leaderboard-{assignment}.csv"'},
        )
    return Leaderboard(assignment=board.assignment.name, phase=board.phase,
                       final_run_id=board.final_run.id if board.final_run else None, rows=rows)
