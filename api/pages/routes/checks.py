"""``/checks``: docs/checks.md as a page (api/pages/checks_doc.py), the target of every
check's link on a report."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from api.pages.checks_doc import CHECKS_PATH, checks_html
from api.pages.rendering import PageRoute, error_page, render
from api.pages.security import ViewerDep

router = APIRouter(route_class=PageRoute, include_in_schema=False, tags=["pages"])


@router.get(CHECKS_PATH)
def read_checks(request: Request, viewer: ViewerDep) -> Response:
    """What each check compares, on which inputs, and how its tolerance is derived; each
    check's row has an id (``<assignment>-<check>``) that reports link to."""
    html = checks_html()
    if html is None:
        return error_page(request, status_code=404, code="checks_document_missing",
                          message="docs/checks.md is not installed on this server")
    return render(request, "checks.html", viewer=viewer, document=html)
