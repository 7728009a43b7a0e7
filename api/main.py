"""The FastAPI application: mounts every router and the error handlers in one place.

`create_app(settings)` builds the app around one Settings object and one engine; tests may
swap ``app.state.session_factory`` (the middleware and the long-poll use it) and override
`api.deps.get_db_session` (the routes' sessions).

The request path (docs/reliability.md, "Request path"): anyio's thread limiter and the
engine's pool both have ``settings.api_threads`` places; `api.admission` admits at most
``api_max_in_flight`` requests that need them, queues the others on the event loop up to a
target delay (503 + Retry-After beyond it or when the queue is full); `api.guard`, in
front of admission, checks the token before any body is read, caps every body and reads it
within a deadline. `begin_shutdown` (called by `grader serve` on SIGTERM) ends the
long-polls and body reads under way, so that a restart closes the port for seconds.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI

from api.admission import Admission, AdmissionMiddleware
from api.errors import install_error_handlers
from api.guard import BodyReads, RequestEdgeMiddleware
from api.longpoll import StatusWatcher
from api.openapi import install_openapi
from api.pages import install_pages
from api.routes import (
    assignments,
    audit,
    health,
    leaderboard,
    lti,
    me,
    regrades,
    similarity,
    staff,
    students,
    submissions,
)
from submissions.db import create_session_factory, engine_from_settings
from submissions.lti.sync import LtiSyncLoop
from submissions.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app. The database schema must already exist (run the migrations first;
    `grader serve` does)."""
    settings = settings or get_settings()
    engine = engine_from_settings(settings, for_api=True)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # One thread per pooled connection (sync routes and dependencies run in these).
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        _app.state.loop = asyncio.get_running_loop()  # for begin_shutdown from a signal handler
        # The LMS's roster and score sync on its schedule (submissions/lti/sync.py).
        lti_loop = None
        if settings.lti_sync_interval_s:
            lti_loop = LtiSyncLoop(lambda: _app.state.session_factory(), settings)
            lti_loop.start()
        yield
        if lti_loop is not None:
            # It releases its lease (a write; after a round under way, waited for briefly),
            # so that another process takes the scheduled sync over at once.
            await anyio.to_thread.run_sync(functools.partial(lti_loop.stop, timeout_s=5.0))
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
    app.state.admission = Admission(
        max_in_flight=settings.api_max_in_flight, max_health=settings.api_health_reserve,
        max_waiting=settings.api_max_waiting, retry_after_s=settings.api_retry_after_s,
        target_s=settings.api_queue_target_s,
        saturated_wait_s=settings.api_queue_saturated_wait_s,
        max_queued=settings.api_max_queued)
    # The watcher's one status query per interval takes an `api` place like any read, so the
    # places still bound the threads and connections in use (api/admission.py).
    app.state.status_watcher = StatusWatcher(lambda: app.state.session_factory,
                                             settings.long_poll_interval_s,
                                             place=lambda: app.state.admission.read_place())
    app.state.body_reads = BodyReads()
    install_error_handlers(app)
    # The last added runs first: the edge (token, body cap and deadline), then admission.
    app.add_middleware(AdmissionMiddleware, admission=app.state.admission)
    app.add_middleware(RequestEdgeMiddleware)
    for router in (me.router, students.router, staff.router, assignments.router,
                   submissions.router, regrades.router, similarity.router, leaderboard.router, audit.router,
                   lti.router, health.router):
        app.include_router(router)
    install_pages(app)
    install_openapi(app)
    return app


def begin_shutdown(app: FastAPI) -> None:
    """Start a graceful shutdown (on the app's event loop): every long-poll answers at once
    with the status it first read (the client polls again, reaching the next process), and
    the body reads under way end with 503 ``shutting_down``; new ones are refused alike.
    Requests already admitted finish as usual."""
    app.state.status_watcher.release_all()
    app.state.body_reads.cancel_all()
