"""Web pages for students and staff, server-rendered from the API's own app (Jinja2; no
front-end build step). They share the API's tokens, roles, service functions and presenters
(api/views.py): a page shows what the API answers, to whom the API answers it.

- api/pages/security.py: the session cookie, CSRF, who is looking;
- api/pages/rendering.py: templates, filters, security headers, errors as pages;
- api/pages/report.py, charts.py: a submission's report and its benchmark charts (SVG);
- api/pages/routes/: session (sign-in, home), student (upload, report, history, leaderboard),
  staff (students, regrades, settings, exports, audit, disqualification), term (roster
  add/import, tokens, staff accounts, extensions, final run, course-wide exports), analytics
  (/staff/analytics: the class's picture), similarity (/staff/similarity: similarity review), checks (/checks: docs/checks.md,
  api/pages/checks_doc.py), docs (/docs, /redoc from vendored assets);
- api/pages/templates/, static/ (pages.css, pages.js, vendor/: htmx, Swagger UI, Redoc).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"


def install_pages(app: FastAPI) -> None:
    """Mount the pages, their static files and the API reference on `app` (whose
    ``docs_url``/``redoc_url`` must be None: these replace FastAPI's CDN-backed ones)."""
    from api.pages.routes import analytics, checks, docs, lti, session, similarity, staff, student, term

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for router in (session.router, student.router, staff.router, term.router, analytics.router,
                   similarity.router, checks.router, docs.router, lti.router):
        app.include_router(router)
