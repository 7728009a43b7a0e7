"""Authenticate before any body is read; cap JSON bodies.

FastAPI reads and parses a request's body before it resolves the dependencies that check
the token, so an unauthenticated client could make the API buffer any body it likes
(issue 10: 4 x 100 MB without a token took the API from 144 MB to 1.36 GB). This pure ASGI
middleware runs first for every API request that may carry a body (``POST``, ``PUT``,
``PATCH``, ``DELETE`` under ``/api/``):

1. no ``Authorization: Bearer <token>`` header: 401 ``not_authenticated`` at once;
2. the token is resolved against the database (one short read in the thread pool); an
   unknown token: 401 ``not_authenticated``, before a byte of the body is read;
3. a body that is not an upload (``multipart/form-data``: api/uploads.py caps it while
   streaming) or a roster (``text/csv``, ``text/plain``: api/bodies.py caps it) is at most
   ``max_json_body_bytes``: a larger ``Content-Length`` is refused at once, and a body that
   grows past the cap while streaming is refused as soon as it does (413 ``body_too_large``),
   so no more than the cap is ever buffered. The route then reads the buffered copy.

Roles are still checked by the route's dependencies (403); this only makes sure that nobody
without a valid token gets a body read. Pages (``/``, ``/students/...``) have their own
session cookie and CSRF checks (api/pages/security.py) and are not covered here.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.concurrency import run_in_threadpool

from api.deps import principal_for_token, session_scope
from api.errors import DATABASE_RETRY_AFTER_S, error_response
from submissions.errors import BodyTooLarge, NotAuthenticated, Overloaded

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Content types whose routes stream and cap the body themselves.
_STREAMED_TYPES = frozenset({"multipart/form-data", "text/csv", "text/plain"})


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _unauthenticated(message: str) -> Any:
    return error_response(401, NotAuthenticated.code, message, {"WWW-Authenticate": "Bearer"})


def _too_large(max_bytes: int) -> Any:
    return error_response(413, BodyTooLarge.code,
                          f"the request body is larger than {max_bytes} bytes",
                          max_bytes=max_bytes)


def _token_is_valid(app: Any, token: str) -> bool:
    """True when `token` is a student's, a staff member's or the instructor's (one short
    transaction on the app's session factory; runs in a worker thread)."""
    with contextmanager(session_scope)(app.state.session_factory) as session:
        try:
            principal_for_token(session, token=token, settings=app.state.settings)
        except NotAuthenticated:
            return False
    return True


class AuthBeforeBodyMiddleware:
    """See the module docstring."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or scope.get("method") not in _BODY_METHODS
                or not scope.get("path", "").startswith("/api/")):
            await self.app(scope, receive, send)
            return
        app = scope["app"]
        scheme, _, token = (_header(scope, b"authorization") or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            await _unauthenticated("missing bearer token (Authorization: Bearer <token>)")(
                scope, receive, send)
            return
        try:
            valid = await run_in_threadpool(_token_is_valid, app, token)
        except PoolTimeoutError:
            await error_response(503, Overloaded.code, "the server is busy; retry later",
                                 {"Retry-After": str(DATABASE_RETRY_AFTER_S)})(scope, receive, send)
            return
        except SQLAlchemyError:
            await error_response(503, "database_unavailable",
                                 "the database is unavailable; retry later",
                                 {"Retry-After": str(DATABASE_RETRY_AFTER_S)})(scope, receive, send)
            return
        if not valid:
            await _unauthenticated("invalid token")(scope, receive, send)
            return

        content_type = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
        if content_type in _STREAMED_TYPES:
            await self.app(scope, receive, send)
            return
        max_bytes: int = app.state.settings.max_json_body_bytes
        declared = _header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
            await _too_large(max_bytes)(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body.extend(message.get("body", b""))
            if len(body) > max_bytes:
                await _too_large(max_bytes)(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
