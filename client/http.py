"""A small HTTP client for the grading service: base URL, bearer token, error answers
turned into `ApiError`, and retries of what the server says to retry (503, 429 with
Retry-After) and of unreachable servers, with backoff."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any

import httpx

#: Where `make serve` listens; override with --server or GRADER_SERVER.
DEFAULT_SERVER = "http://127.0.0.1:8000"
SERVER_ENV, TOKEN_ENV = "GRADER_SERVER", "GRADER_TOKEN"


class ApiError(Exception):
    """An error answer of the API (``{"error": {"code", "message", ...}}``) or a server
    that could not be reached (``status`` 0, code ``unreachable``)."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any]) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        """Parse the project's error body; anything else becomes code ``http_error``."""
        try:
            error = response.json()["error"]
            details = {k: v for k, v in error.items() if k not in {"code", "message"}}
            return cls(response.status_code, str(error["code"]), str(error["message"]), details)
        except (ValueError, KeyError, TypeError):
            return cls(response.status_code, "http_error", response.text[:500], {})


def resolve_server(value: str | None) -> str:
    """--server, else $GRADER_SERVER, else DEFAULT_SERVER; without a trailing slash."""
    return (value or os.environ.get(SERVER_ENV) or DEFAULT_SERVER).rstrip("/")


def resolve_token(value: str | None) -> str | None:
    """--token, else $GRADER_TOKEN (None when neither is set)."""
    return value or os.environ.get(TOKEN_ENV) or None


class ServiceClient:
    """One connection to the service, authenticated with one token.

    Retries: a 503 (the server or its database is saturated) or a 429 with
    ``Retry-After`` for a GET, and a connection failure for any idempotent request, are
    retried with jittered exponential backoff (respecting Retry-After) up to `retry_for_s`
    seconds; an upload (POST) is never retried once it may have reached the server.
    """

    def __init__(self, server: str, token: str | None, *, timeout_s: float = 30.0,
                 retry_for_s: float = 60.0,
                 on_retry: Callable[[str, float], None] | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.server = server
        self.http = httpx.Client(base_url=server, headers=headers, timeout=timeout_s,
                                 transport=transport)
        self.retry_for_s = retry_for_s
        self.on_retry = on_retry

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.http.close()

    def request(self, method: str, path: str, *, expect: tuple[int, ...] = (200,),
                **kwargs: Any) -> httpx.Response:
        """Send a request; return the response if its status is in `expect`.

        Raises:
            ApiError: an error answer, or the server stayed unreachable.
        """
        idempotent = method.upper() in {"GET", "HEAD"}
        deadline = time.monotonic() + self.retry_for_s
        delay = 0.5
        while True:
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                connect_failed = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if (idempotent or connect_failed) and time.monotonic() < deadline:
                    self._wait(f"cannot reach {self.server} ({exc})", delay)
                    delay = min(delay * 2, 15.0)
                    continue
                raise ApiError(0, "unreachable", f"cannot reach {self.server}: {exc}", {}) from exc
            if response.status_code in expect:
                return response
            retry_after = response.headers.get("retry-after", "")
            retryable = response.status_code == 503 or (
                response.status_code == 429 and idempotent and retry_after.isdigit())
            if retryable and time.monotonic() < deadline:
                wait = float(retry_after) if retry_after.isdigit() else delay
                self._wait(f"the server is busy ({response.status_code})", wait)
                delay = min(delay * 2, 15.0)
                continue
            raise ApiError.from_response(response)

    def get_json(self, path: str, **kwargs: Any) -> Any:
        """GET `path` and decode its JSON body."""
        return self.request("GET", path, **kwargs).json()

    def _wait(self, why: str, seconds: float) -> None:
        seconds = min(seconds, 60.0) * (0.8 + 0.4 * random.random())  # noqa: S311 - jitter
        if self.on_retry is not None:
            self.on_retry(why, seconds)
        time.sleep(seconds)
