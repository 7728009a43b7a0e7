"""Admission control: a bounded number of requests in flight, 503 + Retry-After beyond it.

A pure ASGI middleware (no body is read, no thread is taken) in front of every route. Each
request is put in one of four classes by its path and query alone:

- ``static``: ``/static/...`` (files served by the event loop): never counted, never refused.
- ``health``: ``/healthz`` and ``/metrics``: bounded apart (``api_health_reserve`` places),
  so a saturated API still answers its health check, and never refused by the bound of the
  others: a check that finds its places taken takes a free ``api`` place, or else waits
  (without a thread) up to ``HEALTH_WAIT_S`` for either, since each check takes
  milliseconds (issue 24: a third overlapping check on an idle server was a 503).
- ``wait``: a long-poll, ``GET /api/v1/submissions/{id}?wait=N`` with N > 0: bounded apart
  (``api_max_waiting``); while it waits it holds no thread and no connection, and each of its
  short reads takes an ``api`` slot of its own (`Admission.read_slot`).
- ``api``: everything else (API routes, pages, the API reference): at most
  ``api_max_in_flight`` = ``api_threads - api_health_reserve`` at once.

The thread limiter and the connection pool both have ``api_threads`` places (api/main.py,
submissions/db.py), so an admitted request always finds a connection without waiting: the
deadlock of issue 10 (threads waiting for connections held by requests waiting for a thread)
cannot form. A request over its class's bound is answered at once with 503, code
``overloaded``, and ``Retry-After: api_retry_after_s`` (a health check after its wait).
Request bodies have been read before a request gets here (api/guard.py), so a place is
never held by a client that is still sending. The counters live in one event loop
and are only touched from it, so plain integers are safe.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from api.errors import error_response
from submissions.errors import Overloaded

RequestClass = Literal["static", "health", "wait", "api"]

#: The long-poll route: GET /api/v1/submissions/{id} (with a `wait` query parameter).
_LONG_POLL_PATH = re.compile(r"^/api/v1/submissions/[^/]+/?$")
_HEALTH_PATHS = frozenset({"/healthz", "/metrics"})
#: How long a health check waits for a place before its 503 (seconds), and how often it looks.
HEALTH_WAIT_S, _HEALTH_POLL_S = 5.0, 0.01
#: Health checks waiting at once; beyond, a check is refused at once (a flood of checks, which
#: need no token, must not cost the event loop more than a bounded polling).
HEALTH_MAX_WAITING = 32


def classify(scope: dict[str, Any]) -> RequestClass:
    """The admission class of an HTTP request from its method, path and query string."""
    path: str = scope.get("path", "")
    if path.startswith("/static/"):
        return "static"
    if path in _HEALTH_PATHS:
        return "health"
    if scope.get("method") == "GET" and _LONG_POLL_PATH.match(path) and _waits(scope):
        return "wait"
    return "api"


def _waits(scope: dict[str, Any]) -> bool:
    query: bytes = scope.get("query_string", b"")
    for pair in query.split(b"&"):
        name, _, value = pair.partition(b"=")
        if name == b"wait" and value.strip(b"0") != b"":
            return True
    return False


@dataclass
class Admission:
    """The bounds of each class and the requests in flight (see the module docstring)."""

    max_in_flight: int
    max_health: int
    max_waiting: int
    retry_after_s: int
    in_flight: dict[str, int] = field(default_factory=lambda: {"health": 0, "wait": 0, "api": 0})
    refused: int = 0
    health_waiting: int = 0

    def _bound(self, kind: RequestClass) -> int:
        return {"health": self.max_health, "wait": self.max_waiting,
                "api": self.max_in_flight}[kind]

    def try_enter(self, kind: RequestClass) -> bool:
        """Take a place of `kind` if one is free (True), else count a refusal (False).
        ``static`` always succeeds."""
        if kind == "static":
            return True
        if self.in_flight[kind] >= self._bound(kind):
            self.refused += 1
            return False
        self.in_flight[kind] += 1
        return True

    def leave(self, kind: RequestClass) -> None:
        """Give back a place taken by `try_enter`."""
        if kind != "static":
            self.in_flight[kind] -= 1

    async def enter_health(self) -> RequestClass | None:
        """Take a place for a health check: a ``health`` one, else a free ``api`` one, waiting
        up to HEALTH_WAIT_S for either (at most HEALTH_MAX_WAITING checks wait at once). Returns
        the class taken (give it back with `leave`), or None (a refusal is counted)."""
        deadline = time.monotonic() + HEALTH_WAIT_S
        waiting = False
        try:
            while True:
                for kind in ("health", "api"):
                    if self.in_flight[kind] < self._bound(kind):
                        self.in_flight[kind] += 1
                        return kind
                if time.monotonic() >= deadline or (
                        not waiting and self.health_waiting >= HEALTH_MAX_WAITING):
                    self.refused += 1
                    return None
                if not waiting:
                    waiting = True
                    self.health_waiting += 1
                await anyio.sleep(_HEALTH_POLL_S)
        finally:
            if waiting:
                self.health_waiting -= 1

    @contextmanager
    def read_slot(self) -> Iterator[None]:
        """An ``api`` place for one short database read of a long-poll.

        Raises:
            Overloaded: every ``api`` place is taken (503, Retry-After).
        """
        if not self.try_enter("api"):
            raise Overloaded("the server is busy; retry later", retry_after_s=self.retry_after_s)
        try:
            yield
        finally:
            self.leave("api")

    def overloaded_response(self, headers: dict[str, str] | None = None) -> Any:
        """The 503 answer: code ``overloaded``, ``Retry-After`` (and `headers`)."""
        return error_response(503, Overloaded.code, "the server is busy; retry later",
                              {"Retry-After": str(self.retry_after_s), **(headers or {})})


class AdmissionMiddleware:
    """Pure ASGI middleware applying an `Admission` to every HTTP request."""

    def __init__(self, app: Any, admission: Admission) -> None:
        self.app = app
        self.admission = admission

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        kind: RequestClass | None = classify(scope)
        if kind == "health":
            kind = await self.admission.enter_health()
        elif not self.admission.try_enter(kind):
            kind = None
        if kind is None:
            await self.admission.overloaded_response()(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.admission.leave(kind)
