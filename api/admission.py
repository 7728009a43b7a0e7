"""Admission control by queueing delay: a bounded number of requests in flight, the others
waiting in a bounded queue up to a target delay, 503 + Retry-After only beyond it.

A pure ASGI middleware (no body is read, no thread is taken) in front of every route. Each
request is put in one of four classes by its path and query alone:

- ``static``: ``/static/...`` (files served by the event loop): never counted, never refused.
- ``health``: ``/healthz`` and ``/metrics``: bounded apart (``api_health_reserve`` places),
  so a saturated API still answers its health check, and never refused by the bound of the
  others: a check that finds its places taken takes a free ``api`` place, or else waits
  (without a thread) up to ``HEALTH_WAIT_S`` for either, since each check takes
  milliseconds (issue 24: a third overlapping check on an idle server was a 503).
- ``wait``: a long-poll, ``GET /api/v1/submissions/{id}?wait=N`` with N > 0: it holds no
  ``api`` place while it waits (at most ``api_max_waiting`` wait at once); each of its short
  reads queues for an ``api`` place of its own (`Admission.read_place`), as does the one
  status query per interval of all the waiters (api/longpoll.py).
- ``api``: everything else (API routes, pages, the API reference): at most
  ``api_max_in_flight`` = ``api_threads - api_health_reserve`` in flight at once (`Gate`).

Why a queue (issue 38). The first version refused a request at once when its class's places
were taken: 120 concurrent status reads on an idle server got 98 x 503, although the 22
admitted ones were answered within 0.9 s and the whole burst could have been served in about
a second; 100 long-polls arriving together got 77 x 503. The bound was on instantaneous
concurrency, not on how long a request would wait. Now a request that finds every place
taken waits for one in a FIFO queue, as an ``asyncio`` future on the event loop (no thread,
no connection), and is refused only when:

- it has waited ``api_queue_target_s`` (1.5 s) without a place while the queue has drained
  (been empty) within the last ``api_queue_target_s``: a burst the server absorbs;
- or, once the queue has stayed non-empty for longer than that (a standing queue: requests
  arrive faster than they are served, i.e. saturation, not a burst), after
  ``api_queue_saturated_wait_s`` (0.5 s): under saturation new requests are shed quickly, so
  that the queue's delay stays bounded and a refused client learns it at once;
- or, before either, as soon as the queue's measured drain rate says it cannot get a place
  within that allowance (below);
- or the queue already holds ``api_max_queued`` requests (refused at once).

This is the controlled-delay queue of "Fail at Scale" (Maurer, ACM Queue 13(8), 2015: CoDel
applied to a server's request queue): the wait a request may spend queued depends on whether
the queue has been empty recently. The target is a wait, so on a fast machine more requests
fit in it and on a slow or loaded one fewer: nothing is tuned to a request count.

Refusing the tail early (issue 38, "reads never shed on an idle server"). With the timer alone
the tail of a large burst waits its whole allowance before it learns that it is refused, so no
single target served both bursts of the issue on the 2-core machine of docs/reliability.md:
1 s refused part of 120 reads the server answered in 1.1-1.3 s, and 1.5 s, which admits them,
answered 300 reads in up to 2.1-2.2 s (refusals at 1.9-2.1 s). So `Gate` measures how fast its
queue drains: during a busy period (the queue non-empty) every hand-off in `Gate.leave` is a
departure, and the departure interval d (seconds) is (latest departure - first departure) /
(departures - 1), trusted after `Gate.min_departures` (MIN_DEPARTURES says why) and measured
afresh once the queue empties. The time from the queue's start to its first departure is not
counted: it is one whole service time (the places filling), not the drain rate. After each
hand-off, the waiter at (1-based) position k that has waited w seconds is refused at once when
w + k d exceeds its allowance, walking from the tail up to the first waiter that fits (so
O(refused + 1) per departure), and a newcomer is refused at once when its position times d
already does. An under-estimate of d only leaves a refusal to the timer, which stays as the
backstop; an over-estimate would refuse a request that would have got its place, hence the
minimum number of departures.

Why the threads-vs-connections deadlock of issue 10 cannot return. The thread limiter and the
connection pool both have ``api_threads`` places (api/main.py, submissions/db.py); an admitted
request uses at most one connection, and at most ``api_max_in_flight`` + ``api_health_reserve``
= ``api_threads`` requests are admitted at once, so an admitted request always finds a thread
and a connection without waiting. A queued request holds neither: it has not been admitted,
and it waits on the event loop. Nothing waits for a place while holding one (the token check
of api/guard.py takes its place and gives it back before the request reaches this middleware;
a long-poll holds a ``wait`` place, never an ``api`` one, while its reads queue).

A refused request is answered with 503, code ``overloaded``, and
``Retry-After: api_retry_after_s``. Request bodies have been read before a request gets here
(api/guard.py), so a place is never held, nor a queue entry taken, by a client that is still
sending. The counters and the queue live in one event loop and are only touched from it, so
plain integers, a deque and a dict are safe.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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


#: Departures (hand-offs) of a busy period before its measured departure interval is trusted
#: to refuse a waiter early (`Gate.min_departures`): at least MIN_DEPARTURES and at least
#: MIN_GENERATIONS x `places`. An under-estimate only leaves the refusal to the timer; an
#: over-estimate refuses requests that would have got their place. Departures come in clumps:
#: requests admitted together share the cores and finish together, so with 22 places an idle
#: server's departures came about 22 at a time, one service time apart (0.11-0.44 s, up to 3x
#: from one clump to the next: GC, the load client's share of the cores). Trusted after 8
#: departures, the estimate rested on the first gap alone: in 2 of 10 bursts of 120 reads that
#: the server answered within the target, 5 and 22 of the tail were refused (docs/reliability.md,
#: 2026-12-05). Over two clumps, replayed on recorded traces of 14 such bursts, none would be.
MIN_DEPARTURES = 8
MIN_GENERATIONS = 2


class Gate:
    """`places` holders at once and a bounded FIFO queue of waiters with a controlled delay
    (the module docstring says when a waiter is refused).

    Args:
        places: holders at once (>= 1).
        target_s: seconds a waiter may wait while the queue has been empty within the last
            `target_s` (a burst).
        saturated_wait_s: seconds a waiter may wait once the queue has stayed non-empty for
            longer than `target_s` (saturation); at most `target_s`.
        max_queued: waiters at once; beyond, `enter` refuses at once (0: no queue at all).
        clock: seconds, monotonic (tests pass their own).

    Only touched from one event loop.
    """

    def __init__(self, places: int, *, target_s: float, saturated_wait_s: float,
                 max_queued: int, clock: Any = time.monotonic) -> None:
        self.places = places
        self.target_s = target_s
        self.saturated_wait_s = min(saturated_wait_s, target_s)
        self.max_queued = max_queued
        self.clock = clock
        self.min_departures = max(MIN_DEPARTURES, MIN_GENERATIONS * places)
        self.holders = 0
        self._queue: deque[asyncio.Future[bool]] = deque()
        # Each waiter's enqueue time and allowance (seconds), for the prediction.
        self._waiters: dict[asyncio.Future[bool], tuple[float, float]] = {}
        self._last_empty = clock()  # when the queue was last seen empty
        # The departures (hand-offs) of this busy period: how many, the first's and the
        # latest's times (seconds); reset when the queue empties (`departure_interval_s`).
        self._departures = 0
        self._first_departure = self._last_departure = 0.0
        # Counters (tests, the figures of scripts/admission_load.py).
        self.admitted = 0  # entries, at once or after a wait
        self.admitted_after_wait = 0
        self.longest_wait_s = 0.0  # the longest wait of an admitted request
        self.refused_full = 0  # refused at once: the queue was full
        self.refused_late = 0  # refused after waiting its whole allowance
        self.refused_predicted = 0  # refused early: the drain rate says it would wait longer

    @property
    def queued(self) -> int:
        """Waiters in the queue now."""
        return len(self._queue)

    @property
    def refused(self) -> int:
        """Refusals so far (queue full, a wait beyond its allowance, measured or predicted)."""
        return self.refused_full + self.refused_late + self.refused_predicted

    def departure_interval_s(self) -> float | None:
        """The queue's measured departure interval (seconds per hand-off) in this busy period:
        (latest departure - first departure) / (departures - 1), or None before
        `min_departures` departures (MIN_DEPARTURES says why). The time from the queue's
        start to its first departure is not counted: that is one whole service time (the
        places filling), not the drain rate, and would over-estimate it."""
        if self._departures < self.min_departures:
            return None
        return (self._last_departure - self._first_departure) / (self._departures - 1)

    def allowed_wait_s(self) -> float:
        """How long a request arriving now may wait: `target_s` when the queue has been
        empty within the last `target_s`, else `saturated_wait_s`."""
        now = self.clock()
        if not self._queue:
            self._last_empty = now
        return self.target_s if now - self._last_empty <= self.target_s else self.saturated_wait_s

    def try_enter(self) -> bool:
        """Take a place if one is free and nobody is queued for it (True); never waits and
        counts no refusal."""
        if self.holders < self.places and not self._queue:
            self.holders += 1
            self.admitted += 1
            return True
        return False

    async def enter(self) -> bool:
        """Take a place, waiting in the queue (on the event loop: no thread) for at most
        `allowed_wait_s()`. True: admitted (give the place back with `leave`); False:
        refused (the queue is full, the measured drain rate says no place would come within
        the allowance, or none came)."""
        if self.try_enter():
            return True
        if len(self._queue) >= self.max_queued:
            self.refused_full += 1
            return False
        allowed_s = self.allowed_wait_s()
        interval_s = self.departure_interval_s()
        if interval_s is not None and (len(self._queue) + 1) * interval_s > allowed_s:
            self.refused_predicted += 1  # it would join the tail only to be refused later
            return False
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[bool] = loop.create_future()
        started = self.clock()
        self._queue.append(granted)
        self._waiters[granted] = (started, allowed_s)
        timer = loop.call_later(allowed_s, self._expire, granted)
        try:
            admitted = await asyncio.shield(granted)
        except asyncio.CancelledError:  # the request was cancelled while it waited
            timer.cancel()
            if granted.done() and not granted.cancelled() and granted.result():
                self.leave()  # a place was handed over just now: pass it on
            else:
                granted.cancel()
                self._forget(granted)
            raise
        timer.cancel()
        if admitted:
            waited_s = self.clock() - started
            self.admitted_after_wait += 1
            self.longest_wait_s = max(self.longest_wait_s, waited_s)
        return admitted

    def leave(self) -> None:
        """Give a place back: handed to the longest waiter still waiting, if any (a
        departure of the queue; then the tail that can no longer make it is refused)."""
        while self._queue:
            waiter = self._queue.popleft()
            self._waiters.pop(waiter, None)
            # A waiter of an event loop that has ended (a test client's) can take nothing.
            if not waiter.done() and not waiter.get_loop().is_closed():
                waiter.set_result(True)  # the place passes to it; `holders` is unchanged
                self.admitted += 1
                self._depart()
                return
        self.holders -= 1
        self._note_if_empty()

    def _depart(self) -> None:
        """Count a hand-off as a departure of this busy period, then refuse from the tail
        each waiter whose wait so far plus its position times the departure interval
        exceeds its allowance, up to the first one that fits (O(refused + 1))."""
        now = self.clock()
        if self._departures == 0:
            self._first_departure = now
        self._last_departure = now
        self._departures += 1
        self._note_if_empty()
        interval_s = self.departure_interval_s()
        if interval_s is None:
            return
        while self._queue:
            waiter = self._queue[-1]
            if waiter.done() or waiter.get_loop().is_closed():
                self._queue.pop()  # nobody waits on it any more
                self._waiters.pop(waiter, None)
                continue
            enqueued_at, allowed_s = self._waiters[waiter]
            if now - enqueued_at + len(self._queue) * interval_s <= allowed_s:
                break
            self._queue.pop()
            del self._waiters[waiter]
            waiter.set_result(False)
            self.refused_predicted += 1
        self._note_if_empty()

    def _expire(self, waiter: asyncio.Future[bool]) -> None:
        if not waiter.done():
            waiter.set_result(False)
            self.refused_late += 1
            self._forget(waiter)

    def _forget(self, waiter: asyncio.Future[bool]) -> None:
        self._waiters.pop(waiter, None)
        try:
            self._queue.remove(waiter)
        except ValueError:
            pass
        self._note_if_empty()

    def _note_if_empty(self) -> None:
        """When the queue is empty: note the time (the controlled delay) and end the busy
        period (its departure interval is measured afresh by the next)."""
        if not self._queue:
            self._last_empty = self.clock()
            self._departures = 0


@dataclass
class Admission:
    """The places of each class, the ``api`` queue and the requests in flight (see the module
    docstring). `target_s`, `saturated_wait_s` and `max_queued` configure the ``api`` queue
    (`Gate`)."""

    max_in_flight: int
    max_health: int
    max_waiting: int
    retry_after_s: int
    target_s: float = 1.5
    saturated_wait_s: float = 0.5
    max_queued: int = 1000
    api: Gate = field(init=False)
    health_in_flight: int = 0
    waiting: int = 0  # long-polls under way (``wait`` places taken)
    refused_other: int = 0  # health checks and long-polls refused
    health_waiting: int = 0

    def __post_init__(self) -> None:
        self.api = Gate(self.max_in_flight, target_s=self.target_s,
                        saturated_wait_s=self.saturated_wait_s, max_queued=self.max_queued)

    @property
    def refused(self) -> int:
        """Requests refused so far, every class."""
        return self.api.refused + self.refused_other

    async def enter(self, kind: RequestClass) -> RequestClass | None:
        """Admit a request of `kind`: the class whose place it took (give it back with
        `leave`), or None when it is refused. ``static`` is always admitted; ``api`` may
        wait in the queue; a health check may take an ``api`` place (`enter_health`)."""
        if kind == "static":
            return kind
        if kind == "health":
            return await self.enter_health()
        if kind == "wait":
            if self.waiting >= self.max_waiting:
                self.refused_other += 1
                return None
            self.waiting += 1
            return kind
        return kind if await self.api.enter() else None

    def leave(self, kind: RequestClass) -> None:
        """Give back a place taken by `enter`."""
        if kind == "api":
            self.api.leave()
        elif kind == "health":
            self.health_in_flight -= 1
        elif kind == "wait":
            self.waiting -= 1

    async def enter_health(self) -> RequestClass | None:
        """Take a place for a health check: a ``health`` one, else a free ``api`` one (only
        when nobody is queued for it), waiting up to HEALTH_WAIT_S for either (at most
        HEALTH_MAX_WAITING checks wait at once). Returns the class taken (give it back with
        `leave`), or None (a refusal is counted)."""
        deadline = time.monotonic() + HEALTH_WAIT_S
        waiting = False
        try:
            while True:
                if self.health_in_flight < self.max_health:
                    self.health_in_flight += 1
                    return "health"
                if self.api.try_enter():
                    return "api"
                if time.monotonic() >= deadline or (
                        not waiting and self.health_waiting >= HEALTH_MAX_WAITING):
                    self.refused_other += 1
                    return None
                if not waiting:
                    waiting = True
                    self.health_waiting += 1
                await anyio.sleep(_HEALTH_POLL_S)
        finally:
            if waiting:
                self.health_waiting -= 1

    @asynccontextmanager
    async def read_place(self) -> AsyncIterator[None]:
        """An ``api`` place for one short database read outside an admitted request (a
        long-poll's reads and its status query, the token check before a body), queued as
        any request is.

        Raises:
            Overloaded: no place came within the queue's allowance (503, Retry-After).
        """
        if not await self.api.enter():
            raise Overloaded("the server is busy; retry later", retry_after_s=self.retry_after_s)
        try:
            yield
        finally:
            self.api.leave()

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
        kind = await self.admission.enter(classify(scope))
        if kind is None:
            await self.admission.overloaded_response()(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.admission.leave(kind)
