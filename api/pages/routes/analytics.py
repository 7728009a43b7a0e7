"""``/staff/analytics``: the class's picture per assignment (submissions/analytics.py), as a
page and as a CSV. Staff only. GETs: nothing changes, and the numbers are the class's in
aggregate (no student is named), so unlike the gradebook exports they are not audited."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from api.deps import SessionDep
from api.pages.checks_doc import check_url
from api.pages.rendering import PageRoute, render
from api.pages.security import StaffViewer
from grader.manifest import DEFAULT_ASSIGNMENT, MANIFESTS
from submissions import assignments
from submissions.analytics import analytics_csv, class_analytics

router = APIRouter(route_class=PageRoute, include_in_schema=False, tags=["pages"])

AssignmentName = Annotated[str, Query(max_length=100)]


@router.get("/staff/analytics")
def read_analytics(request: Request, viewer: StaffViewer, session: SessionDep,
                   assignment: AssignmentName = DEFAULT_ASSIGNMENT) -> Response:
    """Each check's pass rate, the checks failed most and their most common hints, and both
    per UTC day of upload; a link to the CSV."""
    name = assignments.resolve_manifest(assignment).name  # 422 unknown_assignment
    analytics = class_analytics(session, assignment=name)
    return render(request, "analytics.html", viewer=viewer, analytics=analytics,
                  assignment_names=list(MANIFESTS),
                  docs={c.name: check_url(name, c.name) for c in analytics.checks})


@router.get("/staff/analytics.csv")
def download_analytics(viewer: StaffViewer, session: SessionDep,
                       assignment: AssignmentName = DEFAULT_ASSIGNMENT) -> Response:
    """The same numbers as CSV (submissions.analytics.analytics_csv): one row per check and
    day, plus one per check over every day."""
    name = assignments.resolve_manifest(assignment).name
    return Response(analytics_csv(class_analytics(session, assignment=name)),
                    media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="analytics-{name}.csv"',
                             "Cache-Control": "no-store"})
