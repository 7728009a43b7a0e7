"""The OpenAPI document, completed with the error answers every route really gives.

Routes declare their specific answers (404 ``submission_not_found``, 409 ...); the answers
that come from the request path itself are added here to every operation they can occur
on, all with the project's error schema (`api.schemas.ErrorResponse`):

- 401 ``not_authenticated`` and 403 (role) on every ``/api/`` route (but `GET /api/v1/me`,
  which any valid token may call);
- 404 on routes with a path parameter (and the staff filter of `GET /api/v1/submissions`);
- 408 ``request_timeout`` and 413 ``body_too_large`` on every ``POST``/``PUT``/``PATCH``/
  ``DELETE`` (api/guard.py: a body that does not arrive in time, or is larger than its
  route's cap);
- 422 ``validation_error`` everywhere, replacing FastAPI's ``HTTPValidationError`` schema
  (the app answers validation errors in the project's shape, api/errors.py);
- 503 ``overloaded`` / ``database_unavailable`` everywhere, with ``Retry-After``
  (api/admission.py, api/errors.py);
- 400 ``body_malformed`` (undecodable bytes) on every body method, ``upload_truncated`` on
  the upload;
- errors as ``application/json`` also on routes whose success is CSV or Python source;
- the media type of ``/metrics`` (Prometheus text, ``text/plain``).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

_ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying",
                                "schema": {"type": "integer"}}}
_DESCRIPTIONS = {
    "400": "body_malformed (a body that cannot be decoded) or, for an upload, "
           "upload_truncated (the multipart body ends before its closing boundary)",
    "401": "not_authenticated: missing or invalid bearer token (checked before any body is "
           "read)",
    "403": "the token's role may not do this (student_required, staff_required, "
           "instructor_required, or a course rule)",
    "404": "not found (the code names what: submission_not_found, student_not_found, ...)",
    "408": "request_timeout: the body did not arrive within GRADER_API_BODY_TIMEOUT_S "
           "(30 s); the connection is closed",
    "413": "body_too_large: a body over its route's cap (GRADER_MAX_JSON_BODY_BYTES, 64 KiB, "
           "whatever its content type), or upload_too_large (uploads, rosters)",
    "422": "validation_error (a parameter, header or body field malformed or out of range; "
           "`errors` lists them) or a course rule named by its code",
    "503": "overloaded (no request place came within the queue's target delay, or the "
           "queue is full), database_unavailable, or shutting_down "
           "(a restart): retry after Retry-After seconds; nothing was done",
}
_BODY_METHODS = {"post", "put", "patch", "delete"}
_NO_ROLE_CHECK = {("get", "/api/v1/me")}
_EXTRA_404 = {("get", "/api/v1/submissions")}


def _error(code: str) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": _DESCRIPTIONS[code],
                              "content": {"application/json": {"schema": _ERROR_REF}}}
    if code == "503":
        answer["headers"] = _RETRY_AFTER
    return answer


def complete_error_answers(schema: dict[str, Any]) -> None:
    """Add the request path's error answers to every operation of `schema` (in place)."""
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in {"get", "put", "post", "patch", "delete", "head", "options"}:
                continue
            answers: dict[str, Any] = operation.setdefault("responses", {})
            codes = {"503"}
            if path.startswith("/api/"):
                codes |= {"401", "422"}
                if (method, path) not in _NO_ROLE_CHECK:
                    codes.add("403")
                if "{" in path or (method, path) in _EXTRA_404:
                    codes.add("404")
                if method in _BODY_METHODS:
                    codes |= {"400", "408", "413"}
            for code in sorted(codes):
                if code not in answers:
                    answers[code] = _error(code)
                elif code == "503":
                    answers[code].setdefault("headers", _RETRY_AFTER)
                    content = answers[code].setdefault("content", {})
                    current = content.get("application/json", {}).get("schema")
                    if current is not None and current != _ERROR_REF:  # e.g. /healthz's Health
                        content["application/json"] = {"schema": {"anyOf": [current, _ERROR_REF]}}
            for code, answer in answers.items():
                # FastAPI files a route's extra answers under its own media type (text/csv,
                # text/x-python): errors are always JSON.
                content = answer.get("content", {})
                if code >= "400" and content and "application/json" not in content:
                    schema_ = next(iter(content.values())).get("schema", _ERROR_REF)
                    answer["content"] = {"application/json": {"schema": schema_}}
            if "422" in answers:
                answers["422"]["content"] = {"application/json": {"schema": _ERROR_REF}}
                answers["422"].setdefault("description", _DESCRIPTIONS["422"])
            if (method, path) == ("get", "/metrics"):
                answers["200"]["content"] = {"text/plain": {"schema": {"type": "string"}}}
            if "429" in answers:
                answers["429"].setdefault("headers", _RETRY_AFTER)


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` return the completed document (built once)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if getattr(app.state, "openapi_completed", False):
            return app.openapi_schema  # type: ignore[return-value]
        schema = build()
        complete_error_answers(schema)
        app.state.openapi_completed = True
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
