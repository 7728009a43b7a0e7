"""The one place where exceptions become HTTP responses.

Every error body is ``{"error": {"code": <stable code>, "message": ..., <details>}}``.
Tests assert on `code`; messages are for humans and may change.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from submissions.errors import DomainError

logger = logging.getLogger("api")

#: Retry-After (seconds) of a 503 caused by the database (unreachable, or no connection
#: free within the pool timeout).
DATABASE_RETRY_AFTER_S = 5


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                   **details: object) -> JSONResponse:
    """A JSON error response in the project's shape."""
    body = {"error": {"code": code, "message": message, **jsonable_encoder(details)}}
    return JSONResponse(status_code=status, content=body, headers=headers)


async def _domain_error(_request: Request, exc: DomainError) -> JSONResponse:
    retry_after = getattr(exc, "retry_after_s", None)
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    if exc.http_status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    return error_response(exc.http_status, exc.code, exc.message, headers, **exc.details)


async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    return error_response(422, "validation_error", "invalid request", errors=exc.errors())


async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    # 400: FastAPI's "There was an error parsing the body" (bytes that are not UTF-8 JSON).
    code = {400: "body_malformed", 404: "not_found", 405: "method_not_allowed"}.get(
        exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), exc.headers)


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
    app.add_exception_handler(OperationalError, _database_unavailable)
    app.add_exception_handler(InterfaceError, _database_unavailable)
    app.add_exception_handler(DisconnectionError, _database_unavailable)
    app.add_exception_handler(PoolTimeoutError, _pool_exhausted)
    app.add_exception_handler(Exception, _unexpected)
