"""The edge of the API: every request body capped and read within a deadline, the token
checked before a byte of it is read, all before admission.

A pure ASGI middleware, the outermost of the app (api/main.py), so it runs before
`api.admission`. For every ``POST``, ``PUT``, ``PATCH`` and ``DELETE``:

1. under ``/api/``, the token before the body: no ``Authorization: Bearer <token>`` header is
   a 401 ``not_authenticated`` at once; the token is then resolved against the database (one
   short read in the thread pool, under an ``api`` place of `Admission.read_place`, queued
   as any request is: 503 when none comes within the queue's target delay; the place is
   given back before the body is read); an unknown token is a 401, before a byte of the
   body is read (issue 10: 4 x 100 MB without a token took the API from 144 MB to 1.36 GB). Pages (``/``,
   ``/students/...``) have their own session cookie and CSRF checks (api/pages/security.py);
2. the body is capped with the cap its route needs, whatever its content type (`body_cap`):
   the upload routes' (``GRADER_MAX_UPLOAD_BYTES`` plus the multipart framing), the roster
   import's (2 MiB), and ``GRADER_MAX_JSON_BODY_BYTES`` (64 KiB) for every other route. A
   larger ``Content-Length`` is refused at once and a body that grows past it while streaming
   as soon as it does (413 with the route's code), so no more than the cap is ever buffered
   (issue 24: ``text/plain``, ``text/csv`` or multipart sent to a JSON route were buffered
   whole: one 200 MB request took the server from 116 to 458 MB);
3. the whole body must arrive within ``GRADER_API_BODY_TIMEOUT_S`` (30 s: at least 70 KB/s
   for the largest cap, 9 KB/s for an upload) or the request is answered 408
   ``request_timeout`` and its connection closed. The body is read here, before admission, so
   a client that sends headers and then trickles or stops its body holds no request place:
   issue 24's 22 stalled connections held every place and the API answered 503 to everyone;
4. the route then reads the buffered copy (the upload and roster parsers keep their own caps).

Other methods pass through: their routes read no body, and a ``Content-Length`` over the
JSON cap is refused at once as above. Every answer given before the body was read in full
carries ``Connection: close``, so the rest of a refused body is never read. A client that
disconnects while sending its body is logged in one line (no traceback). Headers have their
own deadline in the connection (api/connections.py). On shutdown (`begin_shutdown`) the body
reads under way end at once with 503, so a restart does not wait for them.
"""

from __future__ import annotations

import logging
import math
from contextlib import contextmanager
from typing import Any

import anyio
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.concurrency import run_in_threadpool

from api.admission import Admission
from api.bodies import MAX_ROSTER_BYTES
from api.deps import principal_for_token, session_scope
from api.errors import DATABASE_RETRY_AFTER_S, error_response
from api.uploads import FRAMING_ALLOWANCE_BYTES
from submissions.errors import (
    BodyTooLarge,
    DomainError,
    NotAuthenticated,
    Overloaded,
    RequestTimeout,
    UploadTooLarge,
    describe_size,
)
from submissions.settings import Settings

logger = logging.getLogger("api.guard")

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: The routes that take a file (API and web form): the upload cap.
_UPLOAD_ROUTES = frozenset({("POST", "/api/v1/submissions"), ("POST", "/submit")})
_ROSTER_ROUTES = frozenset({("POST", "/api/v1/students/import")})
_CLOSE = {"Connection": "close"}


def body_cap(method: str, path: str, settings: Settings) -> tuple[int, type[DomainError]]:
    """The largest body (bytes) the route of `method` `path` takes, and the error that
    refuses a larger one (413: ``upload_too_large`` for the upload and roster routes, which
    answered it before, else ``body_too_large``)."""
    route = (method, path.rstrip("/") or "/")
    if route in _UPLOAD_ROUTES:
        return settings.max_upload_bytes + FRAMING_ALLOWANCE_BYTES, UploadTooLarge
    if route in _ROSTER_ROUTES:
        return MAX_ROSTER_BYTES, UploadTooLarge
    return settings.max_json_body_bytes, BodyTooLarge


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _declared_length(scope: dict[str, Any]) -> int | None:
    declared = (_header(scope, b"content-length") or "").strip()
    return int(declared) if declared.isdigit() else None


def _unauthenticated(message: str) -> Any:
    return error_response(401, NotAuthenticated.code, message,
                          {"WWW-Authenticate": "Bearer", **_CLOSE})


def _too_large(scope: dict[str, Any], max_bytes: int, error: type[DomainError]) -> Any:
    """The 413 for a body over `max_bytes`. An upload route names the file's limit (what the
    README and the form say, ``256 KiB``; the body cap adds the multipart framing, which is
    no limit a person can act on). A page (any path outside ``/api/``) gets a page of the
    site with the limit and the way back, never the API's JSON (issue 38)."""
    settings: Settings = scope["app"].state.settings
    method, path = scope.get("method", ""), scope.get("path", "")
    is_upload = (method, path.rstrip("/") or "/") in _UPLOAD_ROUTES
    if is_upload:
        limit = settings.max_upload_bytes
        message = f"the file is larger than the upload limit of {describe_size(limit)}"
    else:
        limit = max_bytes
        message = f"the request body is larger than {describe_size(limit)}"
    if not path.startswith("/api/"):
        from api.pages.rendering import too_large_page  # the pages import this module's app

        return too_large_page(scope, code=error.code, message=message, limit_bytes=limit,
                              sent_bytes=_declared_length(scope), headers=_CLOSE)
    return error_response(413, error.code, message, _CLOSE, max_bytes=limit)


def _guard_answer(scope: dict[str, Any], status: int, code: str, message: str, headers: dict[str, str],
                  **details: Any) -> Any:
    """The guard's own answer before any route ran: the API's JSON error for ``/api/`` paths;
    for a page (any other path) a page of the site with the message and the way back, never
    raw JSON in the browser (issue 38)."""
    if not scope.get("path", "").startswith("/api/"):
        from starlette.requests import Request

        from api.pages.rendering import error_page  # the pages import this module's app

        return error_page(Request(scope), status_code=status, code=code, message=message, headers=headers)
    return error_response(status, code, message, headers, **details)


def _unavailable(code: str, message: str) -> Any:
    return error_response(503, code, message,
                          {"Retry-After": str(DATABASE_RETRY_AFTER_S), **_CLOSE})


def _token_is_valid(app: Any, token: str) -> bool:
    """True when `token` is a student's, a staff member's or the instructor's (one short
    transaction on the app's session factory; runs in a worker thread)."""
    with contextmanager(session_scope)(app.state.session_factory) as session:
        try:
            principal_for_token(session, token=token, settings=app.state.settings)
        except NotAuthenticated:
            return False
    return True


class BodyReads:
    """The body reads under way in this process, so that `begin_shutdown` ends them."""

    def __init__(self) -> None:
        self.scopes: set[anyio.CancelScope] = set()
        self.closing = False

    def cancel_all(self) -> None:
        """End every body read under way (each answers 503) and refuse new ones."""
        self.closing = True
        for scope in list(self.scopes):
            scope.cancel()


class RequestEdgeMiddleware:
    """See the module docstring."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        app = scope["app"]
        settings: Settings = app.state.settings
        method, path = scope.get("method", ""), scope.get("path", "")
        max_bytes, too_large = body_cap(method, path, settings)
        declared = _declared_length(scope)
        if method not in _BODY_METHODS:
            if declared is not None and declared > max_bytes:
                await _too_large(scope, max_bytes, too_large)(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return

        if path.startswith("/api/"):
            refusal = await self._check_token(app, scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        if declared is not None and declared > max_bytes:
            await _too_large(scope, max_bytes, too_large)(scope, receive, send)
            return
        body = await self._read_body(app.state.body_reads, scope, receive, send,
                                     max_bytes, too_large, settings.api_body_timeout_s)
        if body is None:
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _check_token(app: Any, scope: dict[str, Any]) -> Any | None:
        """None when the request carries a valid bearer token, else the answer refusing it."""
        scheme, _, token = (_header(scope, b"authorization") or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return _unauthenticated("missing bearer token (Authorization: Bearer <token>)")
        admission: Admission = app.state.admission
        try:
            async with admission.read_place():
                valid = await run_in_threadpool(_token_is_valid, app, token)
        except Overloaded:
            return admission.overloaded_response(_CLOSE)
        except PoolTimeoutError:
            return _unavailable(Overloaded.code, "the server is busy; retry later")
        except SQLAlchemyError:
            return _unavailable("database_unavailable", "the database is unavailable; retry later")
        return None if valid else _unauthenticated("invalid token")

    @staticmethod
    async def _read_body(reads: BodyReads, scope: dict[str, Any], receive: Any, send: Any,
                         max_bytes: int, too_large: type[DomainError], timeout_s: float
                         ) -> bytes | None:
        """The whole body (at most `max_bytes`, within `timeout_s`), or None once the request
        has been answered (413, 408, 503) or the client went away."""
        what = f"{scope.get('method')} {scope.get('path')}"
        body = bytearray()
        outcome = "read"
        with anyio.CancelScope() as cancel_scope:
            if reads.closing:
                cancel_scope.cancel()
            reads.scopes.add(cancel_scope)
            try:
                with anyio.fail_after(timeout_s):
                    while True:
                        message = await receive()
                        if message["type"] != "http.request":
                            outcome = "disconnected"
                            break
                        body.extend(message.get("body", b""))
                        if len(body) > max_bytes:
                            outcome = "too_large"
                            break
                        if not message.get("more_body", False):
                            break
            except TimeoutError:
                outcome = "timeout"
            finally:
                reads.scopes.discard(cancel_scope)
        if cancel_scope.cancelled_caught:
            outcome = "shutdown"
        if outcome == "read":
            return bytes(body)
        if outcome == "disconnected":
            logger.info("client disconnected while sending the body of %s (%d bytes received)",
                        what, len(body))
        elif outcome == "too_large":
            await _too_large(scope, max_bytes, too_large)(scope, receive, send)
        elif outcome == "timeout":
            logger.info("closed %s: its body did not arrive within %s s (%d bytes received)",
                        what, _seconds(timeout_s), len(body))
            await _guard_answer(scope, 408, RequestTimeout.code,
                                f"the request body did not arrive within {_seconds(timeout_s)} s",
                                _CLOSE, timeout_s=timeout_s)(scope, receive, send)
        else:
            await _guard_answer(scope, 503, "shutting_down", "the server is restarting; retry in a moment",
                                {"Retry-After": "1", **_CLOSE})(scope, receive, send)
        return None


def _seconds(value: float) -> str:
    return str(int(value)) if math.isclose(value, round(value)) else f"{value:g}"
