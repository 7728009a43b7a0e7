"""The leaderboard: a query over stored results (never a recomputation)."""

from __future__ import annotations

import csv
import io
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from api.deps import CurrentPrincipal, SessionDep
from api.schemas import Leaderboard, LeaderboardRow
from grader.manifest import DEFAULT_ASSIGNMENT
from submissions import repository, service

router = APIRouter(prefix="/api/v1/leaderboard", tags=["leaderboard"])

CSV_COLUMNS = ("rank", "student_id", "student_name", "submission_id", "headline_speedup",
               "device", "submitted_at")


@router.get("", response_model=Leaderboard,
            responses={200: {"content": {"text/csv": {}}, "description": "JSON, or CSV with ?format=csv"}})
def read_leaderboard(
    principal: CurrentPrincipal,
    session: SessionDep,
    assignment: str = DEFAULT_ASSIGNMENT,
    format: Annotated[Literal["json", "csv"], Query(description="csv: gradebook export")] = "json",  # noqa: A002
) -> Leaderboard | Response:
    """Best passing submission per student, ranked by headline speedup (higher first; ties:
    earlier first); passing submissions without a GPU benchmark follow, by time.
    Students see an anonymised board with their own row marked."""
    service.resolve_assignment(assignment)
    entries = repository.leaderboard_entries(session, assignment=assignment)
    rows = []
    for rank, entry in enumerate(entries, start=1):
        is_you = entry.student_id == principal.student_id
        visible = principal.is_instructor or is_you
        rows.append(
            LeaderboardRow(
                rank=rank,
                is_you=is_you,
                student_id=entry.student_id if visible else None,
                student_name=entry.student_name if visible else None,
                submission_id=entry.submission_id if visible else None,
                headline_speedup=entry.headline_speedup,
                device=entry.device,
                submitted_at=entry.submitted_at,
            )
        )
    if format == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            writer.writerow([
                row.rank, row.student_id or "", row.student_name or "", row.submission_id or "",
                "" if row.headline_speedup is None else f"{row.headline_speedup:.6g}",
                row.device or "", row.submitted_at.isoformat(),
            ])
        return Response(
            buffer.getvalue(),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="leaderboard-{assignment}.csv"'},
        )
    return Leaderboard(assignment=assignment, rows=rows)
