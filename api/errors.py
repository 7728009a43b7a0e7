"""The one place where exceptions become HTTP responses.

Every error body is ``{"error": {"code": <stable code>, "message": ..., <details>}}``.
Tests assert on `code`; messages are for humans and may change.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from submissions.errors import DomainError

logger = logging.getLogger("api")

#: Retry-After (seconds) of a 503 caused by the database (unreachable, or no connection
#: free within the pool timeout).
DATABASE_RETRY_AFTER_S = 5


def json_safe(value: Any) -> Any:
    """`value` (made of what `jsonable_encoder` returns) with every part that strict JSON
    cannot carry replaced: a float that is NaN or infinite (``1e400`` parses as ``inf``)
    becomes its ``repr`` (``"inf"``), and a string's lone surrogates (``"\\ud800"`` in a JSON
    body) become U+FFFD. An error answer echoes what the client sent, so it must never fail
    to serialise (issue 24: such a 422 was a 500)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {json_safe(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                   **details: object) -> JSONResponse:
    """A JSON error response in the project's shape (details made `json_safe`)."""
    body = {"error": {"code": code, "message": json_safe(message),
                      **json_safe(jsonable_encoder(details))}}
    return JSONResponse(status_code=status, content=body, headers=headers)


async def _domain_error(_request: Request, exc: DomainError) -> JSONResponse:
    retry_after = getattr(exc, "retry_after_s", None)
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    if exc.http_status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    return error_response(exc.http_status, exc.code, exc.message, headers, **exc.details)


async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    return error_response(422, "validation_error", "invalid request", errors=exc.errors())


def allowed_methods(request: Request) -> list[str] | None:
    """Every method the OpenAPI document lists for the request's path (HEAD with GET),
    sorted; None for a path it does not list. Starlette's own 405 names only the methods
    of the first route that matches the path, so a path served by two routes
    (``GET`` and ``POST /api/v1/students``) listed one (issue 24)."""
    patterns = getattr(request.app.state, "allow_patterns", None)
    if patterns is None:
        patterns = [(path, re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$"),
                     {method.upper() for method in operations})
                    for path, operations in request.app.openapi().get("paths", {}).items()]
        request.app.state.allow_patterns = patterns
    path = request.url.path
    # The most specific documented paths that match decide: a literal path
    # (``/students/import``) beats ``/students/{id}``, and ``/{name}/extensions/import`` beats
    # ``/{name}/extensions/{student_id}`` (fewer placeholders).
    matching = [(template.count("{"), path_methods) for template, pattern, path_methods in patterns
                if template == path or pattern.match(path)]
    fewest = min((placeholders for placeholders, _ in matching), default=None)
    methods: set[str] = set()
    for placeholders, path_methods in matching:
        if placeholders == fewest:
            methods |= path_methods
    if not methods:
        return None
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    # 400: FastAPI's "There was an error parsing the body" (bytes that are not UTF-8 JSON).
    code = {400: "body_malformed", 404: "not_found", 405: "method_not_allowed"}.get(
        exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    allowed = allowed_methods(request) if exc.status_code == 405 else None
    if allowed is not None:
        headers["Allow"] = ", ".join(allowed)
    return error_response(exc.status_code, code, str(exc.detail), headers or None)


async def _client_disconnected(request: Request, _exc: ClientDisconnect) -> JSONResponse:
    # The client went away before its request was read: nothing to answer and nothing
    # wrong on our side (one line, no traceback); the answer below is never delivered.
    logger.info("client disconnected during %s %s", request.method, request.url.path)
    return error_response(400, "client_disconnected", "the client disconnected")


async def _text_not_storable(_request: Request, exc: Exception) -> JSONResponse:
    # The database refused a value (PostgreSQL: a NUL character in text; psycopg: a lone surrogate). The fields the
    # API takes are checked before this (api/schemas.py `StoredText`); this answers any
    # that slipped through with a 422 instead of a 500.
    logger.warning("the database refused a value: %s", exc)
    return error_response(422, "value_not_storable",
                          "a value cannot be stored (text with a NUL character or a lone "
                          "surrogate)")


async def _database_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    logger.error("database error: %s", exc)
    return error_response(503, "database_unavailable", "the database is unavailable; retry later",
                          {"Retry-After": str(DATABASE_RETRY_AFTER_S)})


async def _pool_exhausted(_request: Request, exc: Exception) -> JSONResponse:
    logger.warning("no database connection free in time: %s", exc)
    return error_response(503, "overloaded", "the server is busy; retry later",
                          {"Retry-After": str(DATABASE_RETRY_AFTER_S)})


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    """Map domain exceptions (and framework/database errors) to JSON error responses."""
    app.add_exception_handler(DomainError, _domain_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(ClientDisconnect, _client_disconnected)  # type: ignore[arg-type]
    app.add_exception_handler(DataError, _text_not_storable)
    app.add_exception_handler(UnicodeEncodeError, _text_not_storable)
    app.add_exception_handler(OperationalError, _database_unavailable)
    app.add_exception_handler(InterfaceError, _database_unavailable)
    app.add_exception_handler(DisconnectionError, _database_unavailable)
    app.add_exception_handler(PoolTimeoutError, _pool_exhausted)
    app.add_exception_handler(Exception, _unexpected)
