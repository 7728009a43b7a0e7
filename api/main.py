"""The FastAPI application: mounts every router and the error handlers in one place.

`create_app(settings)` builds the app around one Settings object and one engine; tests may
swap ``app.state.session_factory`` (or override `api.deps.get_db_session`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api.errors import install_error_handlers
from api.pages import install_pages
from api.routes import (
    assignments,
    audit,
    health,
    leaderboard,
    me,
    regrades,
    staff,
    students,
    submissions,
)
from submissions.db import create_session_factory, engine_from_settings
from submissions.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app. The database schema must already exist (run the migrations first;
    `grader serve` does)."""
    settings = settings or get_settings()
    engine = engine_from_settings(settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()

    app = FastAPI(
        title="Kernel grader",
        version="1",
        summary="Upload a Triton kernel; a GPU worker grades it; see verdicts and the leaderboard; "
        "run a course (deadlines, roles, regrades, disqualification, grade exports).",
        # /docs and /redoc come from api.pages, with the vendored Swagger UI and Redoc (no CDN).
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = create_session_factory(engine)
    install_error_handlers(app)
    for router in (me.router, students.router, staff.router, assignments.router,
                   submissions.router, regrades.router, leaderboard.router, audit.router,
                   health.router):
        app.include_router(router)
    install_pages(app)
    return app
