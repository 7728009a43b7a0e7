"""One status query per interval for every long-poll waiting in this API process.

`GET /api/v1/submissions/{id}?wait=N` answers as soon as the submission's status changes.
Rereading the whole submission for each waiter every interval costs one authenticated read
per waiter per second: on deadline night, with 400 students waiting, 400 reads a second that
take the CPU the graders need (measured: docs/reliability.md, "Load and faults"). Instead,
`StatusWatcher` keeps the waiters of this process and, while there are any, runs one query
per interval for all of them (the current grading's status of each waited-on submission, one
short session in the thread pool) and wakes those whose status changed. The waiter then reads
its submission once, as an ordinary request does. Between two queries nothing is held: no
thread, no connection.

The query takes an ``api`` place (`place`, api/admission.py) like any read, queued as any
read is; when none comes in time the round is skipped (the waiters wait on). When the query
finds the database unreachable (`OperationalError`, `InterfaceError`, `DisconnectionError`:
what the API answers ``database_unavailable`` elsewhere), every waiter learns it at once and
its long-poll answers 503 ``database_unavailable`` with ``Retry-After`` (issue 38: during an
outage a long-poll answered only after its full 30 s). Other database errors skip the round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from api.errors import DATABASE_RETRY_AFTER_S
from submissions.errors import DatabaseUnavailable, Overloaded
from submissions.models import Grading, SubmissionStatus

logger = logging.getLogger("api.longpoll")

#: Errors that mean the database cannot be reached (api/errors.py answers them 503 too).
_OUTAGE_ERRORS = (OperationalError, InterfaceError, DisconnectionError)


@dataclass
class _Waiter:
    status: SubmissionStatus
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    outage: bool = False  # set with `changed` when the status query found the database down


class StatusWatcher:
    """The long-polls of one API process (see the module docstring).

    Args:
        session_factory: returns the app's current session factory (tests swap it).
        interval_s: seconds between two status queries (``GRADER_LONG_POLL_INTERVAL_S``).
        place: returns an async context manager holding an admission place for the query
            (`api.admission.Admission.read_place`; it raises `Overloaded` when none comes in
            time); None: the query takes none (tests of the watcher alone).
    """

    def __init__(self, session_factory: Callable[[], Callable[[], Session]], interval_s: float,
                 place: Callable[[], AbstractAsyncContextManager[None]] | None = None) -> None:
        self.session_factory = session_factory
        self.interval_s = interval_s
        self.place = place or contextlib.nullcontext
        self.queries = 0  # status queries run so far (tests, /metrics-style introspection)
        self._waiters: dict[int, list[_Waiter]] = {}
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closing = False  # set by `release_all`: the process is shutting down

    @property
    def waiting(self) -> int:
        """Long-polls waiting now."""
        return sum(len(waiters) for waiters in self._waiters.values())

    def _statuses(self, submission_ids: list[int]) -> dict[int, SubmissionStatus]:
        """The current grading's status of each submission (absent: none yet, i.e. queued)."""
        with self.session_factory()() as session:
            rows = session.execute(select(Grading.submission_id, Grading.status)
                                   .where(Grading.submission_id.in_(submission_ids), Grading.is_current))
            return {submission_id: status for submission_id, status in rows}

    async def _watch(self) -> None:
        while self._waiters:
            await asyncio.sleep(self.interval_s)
            ids = list(self._waiters)
            if not ids:
                break
            try:
                async with self.place():
                    statuses = await run_in_threadpool(self._statuses, ids)
            except Overloaded:
                continue  # no place in time: the next round asks again
            except _OUTAGE_ERRORS as exc:
                logger.warning("long-polls ended: the database is unreachable: %s", exc)
                self._end_all(outage=True)
                continue
            except SQLAlchemyError:
                continue
            finally:
                self.queries += 1
            for submission_id in ids:
                now = statuses.get(submission_id, SubmissionStatus.QUEUED)
                for waiter in self._waiters.get(submission_id, []):
                    if now != waiter.status:
                        waiter.changed.set()
        self._task = None

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (a new server or test client): start afresh
            self._loop, self._waiters, self._task = loop, {}, None
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._watch())

    def release_all(self) -> None:
        """Shutdown: wake every waiter now and let no new one wait (`closing`)."""
        self.closing = True
        self._end_all(outage=False)

    def _end_all(self, *, outage: bool) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.outage = waiter.outage or outage
                waiter.changed.set()

    async def wait_for_change(self, request: Request, submission_id: int, status: SubmissionStatus,
                              timeout_s: float) -> bool:
        """Wait until the submission's current status is no longer `status`, the client goes
        away, or `timeout_s` seconds pass.

        Returns:
            True when the status changed (as of the last query), else False. After
            `release_all` (shutdown) it returns at once; the caller checks `closing`.

        Raises:
            DatabaseUnavailable: the status query found the database unreachable (at once,
                not at the end of the wait).
        """
        if self.closing:
            return False
        waiter = _Waiter(status)
        self._ensure_running()
        self._waiters.setdefault(submission_id, []).append(waiter)
        deadline = time.monotonic() + timeout_s
        try:
            while not waiter.changed.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or await request.is_disconnected():
                    break
                try:
                    await asyncio.wait_for(waiter.changed.wait(), timeout=min(self.interval_s, remaining))
                except TimeoutError:
                    continue
            if waiter.outage:
                raise DatabaseUnavailable("the database is unavailable; retry later",
                                          retry_after_s=DATABASE_RETRY_AFTER_S)
            return waiter.changed.is_set()
        finally:
            waiters = self._waiters.get(submission_id, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._waiters.pop(submission_id, None)
