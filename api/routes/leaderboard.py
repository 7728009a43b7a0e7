"""The leaderboard: a query over stored gradings (never a recomputation), provisional until
the final ranking run, then that run's numbers (submissions/standings.py)."""

from __future__ import annotations

import io
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from api.deps import CurrentPrincipal, NowDep, SessionDep
from api.params import AssignmentQuery
from api.schemas import ErrorResponse, Leaderboard
from api.views import leaderboard_view
from grader.manifest import DEFAULT_ASSIGNMENT
from submissions.csv_cells import SafeCsvWriter
from submissions.errors import StaffRequired

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
    assignment: AssignmentQuery = DEFAULT_ASSIGNMENT,
    format: Annotated[Literal["json", "csv"], Query(description="csv: staff export")] = "json",  # noqa: A002
) -> Leaderboard | Response:
    """Each student's ranked submission (late and disqualified ones are never ranked).
    Provisional: best passing on-time submission by headline speedup (higher first; equal
    headlines share a rank, and so do passes without a GPU benchmark, after the
    benchmarked ones). Final (after a final ranking run): that run's numbers; failed or
    pending ones have no rank and say why. Staff also get every unranked student with the
    reason (late, disqualified, no passing submission, no submission). Students see an
    anonymised board (no names, ids or times of others, no other unranked rows) with their
    own row marked, unless staff hid the board."""
    board = leaderboard_view(session, assignment=assignment, principal=principal, now=now)
    if format == "csv" and not principal.is_staff:
        raise StaffRequired("the CSV export is for staff")
    rows = board.rows
    if format == "csv":
        buffer = io.StringIO()
        writer = SafeCsvWriter(buffer, lineterminator="\r\n")
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
    return board
