"""A small HTTP client for the grading service: base URL, bearer token, error answers
turned into `ApiError`, and bounded retries with Retry-After and full-jitter backoff of
what is safe to retry (docs/reliability.md, "Client")."""

from __future__ import annotations

import os
import random
import time
import uuid
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


#: Statuses retried: 503 always (the server did nothing: admission refused it, or its
#: transaction was rolled back) and 408 (the server did not get the whole body in time, so it
#: ran nothing: api/guard.py), 502 and 504 (a proxy: the request may have run) only for an
#: idempotent request.
RETRY_ALWAYS, RETRY_IF_IDEMPOTENT = frozenset({408, 503}), frozenset({502, 504})
#: Methods that are idempotent by themselves; a POST or PATCH is when it carries an
#: Idempotency-Key.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


def retry_after_s(response: httpx.Response) -> float | None:
    """The response's ``Retry-After`` in seconds (delta-seconds form; at most 300), or None
    when absent or not a number."""
    value = response.headers.get("retry-after", "").strip()
    return min(float(value), 300.0) if value.isdigit() else None


def full_jitter_s(attempt: int, *, base_s: float = 0.5, cap_s: float = 15.0) -> float:
    """A backoff delay with full jitter: uniform in [0, min(cap, base * 2**attempt)]
    seconds (attempt 0 is the first retry)."""
    return random.uniform(0.0, min(cap_s, base_s * 2.0 ** min(attempt, 30)))  # noqa: S311


def new_idempotency_key() -> str:
    """A fresh Idempotency-Key (a random UUID): one per logical request, reused on its
    retries."""
    return str(uuid.uuid4())


class ServiceClient:
    """One connection to the service, authenticated with one token.

    Retries, until `retry_for_s` seconds have passed since the request began (the last wait
    never ends past that bound), each after ``Retry-After`` when the server sent one plus a
    full-jitter backoff (`full_jitter_s`), so a class of clients told "1 s" does not come
    back in the same second:

    - 503 (overloaded, or the database unavailable: nothing was done) and 408 (the body
      did not arrive in time: nothing was done), for any request;
    - 502, 504, a read/write timeout or a dropped connection, for an idempotent request:
      GET, HEAD, PUT, DELETE, and a POST or PATCH sent with an ``Idempotency-Key`` (the
      server answers its retry with the first answer);
    - a connection attempt that timed out (nothing was sent), for any request;
    - a connection refused once this client has had an answer from the server (it restarts:
      nothing was sent), for any request;
    - 429 with ``Retry-After``, for an idempotent request.

    Anything else is raised as `ApiError` at once: a connection refused before any answer,
    or a name that does not resolve (a wrong ``--server``, or no server running), fails in
    well under a second, not after minutes of retries.
    """

    def __init__(self, server: str, token: str | None, *, timeout_s: float = 30.0,
                 retry_for_s: float = 120.0,
                 on_retry: Callable[[str, float], None] | None = None,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.server = server
        self.http = httpx.Client(base_url=server, headers=headers, timeout=timeout_s,
                                 transport=transport)
        self.retry_for_s = retry_for_s
        self.on_retry = on_retry
        self._sleep = sleep  # seconds -> None; time.sleep unless a test passes its own
        self._clock = clock  # -> seconds; time.monotonic unless a test passes its own
        self._answered = False  # the server has answered this client once: refusals are restarts

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.http.close()

    def request(self, method: str, path: str, *, expect: tuple[int, ...] = (200,),
                idempotency_key: str | None = None, **kwargs: Any) -> httpx.Response:
        """Send a request (with ``Idempotency-Key: idempotency_key`` when given, the same on
        every retry); return the response if its status is in `expect`. `kwargs` go to
        httpx (``params``, ``json``, ``files``, ``timeout`` in seconds, ...).

        Raises:
            ApiError: an error answer, or the server stayed unreachable or busy for
                `retry_for_s` seconds.
        """
        method = method.upper()
        if idempotency_key is not None:
            kwargs["headers"] = {**kwargs.get("headers", {}), "Idempotency-Key": idempotency_key}
        idempotent = method in IDEMPOTENT_METHODS or idempotency_key is not None
        deadline = self._now() + self.retry_for_s
        attempt = 0
        while True:
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.ConnectError as exc:
                # Refused or unknown host before any answer: a wrong address, which retrying
                # will not fix. After one, a restart of the service (nothing was sent).
                if self._answered and self._backoff(f"cannot reach {self.server} (ConnectError)", None,
                                                    attempt, deadline):
                    attempt += 1
                    continue
                raise ApiError(0, "unreachable", f"cannot reach {self.server}: {exc} (is the address "
                               f"right, and the service running? --server or ${SERVER_ENV})", {}) from exc
            except httpx.TransportError as exc:
                never_sent = isinstance(exc, httpx.ConnectTimeout)
                if (idempotent or never_sent) and self._backoff(
                        f"cannot reach {self.server} ({type(exc).__name__})", None, attempt,
                        deadline):
                    attempt += 1
                    continue
                raise ApiError(0, "unreachable", f"cannot reach {self.server}: {exc}", {}) from exc
            self._answered = True
            if response.status_code in expect:
                return response
            status = response.status_code
            retry_after = retry_after_s(response)
            retryable = status in RETRY_ALWAYS or (idempotent and (
                status in RETRY_IF_IDEMPOTENT or (status == 429 and retry_after is not None)))
            if retryable and self._backoff(f"the server is busy ({status})", retry_after,
                                           attempt, deadline):
                attempt += 1
                continue
            raise ApiError.from_response(response)

    def get_json(self, path: str, **kwargs: Any) -> Any:
        """GET `path` and decode its JSON body."""
        return self.request("GET", path, **kwargs).json()

    def _now(self) -> float:
        return (self._clock or time.monotonic)()

    def _backoff(self, why: str, retry_after: float | None, attempt: int,
                 deadline: float) -> bool:
        """Wait before retry number `attempt` + 1: `retry_after` (when the server sent
        one) plus full jitter. False, without waiting, when that would end past `deadline`."""
        seconds = (retry_after or 0.0) + full_jitter_s(attempt)
        if self._now() + seconds > deadline:
            return False
        if self.on_retry is not None:
            self.on_retry(why, seconds)
        (self._sleep or time.sleep)(seconds)
        return True
