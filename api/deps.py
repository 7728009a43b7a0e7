"""Typed FastAPI dependencies. Handlers never build a session or parse a token themselves.

- `SettingsDep`: the one `Settings` object, kept on ``app.state``.
- `SessionDep`: a database session whose transaction belongs to the request: committed after
  the handler returns (before the response is sent), rolled back if it raises.
- `NowDep`: the request's time (aware UTC); tests override `get_now` to stand on a deadline.
- `CurrentPrincipal`: who is calling (a student, a TA or an instructor), from the bearer token.
- `BearerToken`: the bearer token, unchecked, for async routes that open short sessions.
- `CurrentStudent`: a student (401 without a valid token, 403 for staff).
- `StaffOnly`: a TA or an instructor (401 without a valid token, 403 for a student).
- `InstructorOnly`: an instructor (401 without a valid token, 403 for a student or a TA).
- `IdempotencyKeyDep`: the optional ``Idempotency-Key`` header (submissions/idempotency.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from submissions import audit, repository, service, staff
from submissions.errors import InstructorRequired, NotAuthenticated, StaffRequired, StudentRequired
from submissions.lti.launch import SESSION_TOKEN_PREFIX
from submissions.models import StaffMember, StaffRole, Student, utc_now
from submissions.settings import Settings

#: The prefix of the browser sessions an LTI launch opens (submissions/lti/launch.py).
LTI_SESSION_PREFIX = SESSION_TOKEN_PREFIX


def get_settings(request: Request) -> Settings:
    """The settings the app was built with."""
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


#: Set in a request's scope by a route that turned an exception into an answer itself
#: (api/pages/rendering.py ``PageRoute``: an error page): the request failed, so its
#: transaction is rolled back although no exception reaches the session's dependency.
REQUEST_FAILED = "grader.request_failed"


def session_scope(session_factory: Callable[[], Session], *,
                  failed: Callable[[], bool] = lambda: False) -> Iterator[Session]:
    """One session from ``session_factory``: commit on success, roll back on any exception
    or when ``failed()`` says the request failed, close always. The transaction boundary of
    a request (and of the tests' override)."""
    session = session_factory()
    try:
        yield session
        if failed():
            session.rollback()
        else:
            session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def get_db_session(request: Request) -> Iterator[Session]:
    """One session per request; commit on success, roll back on any exception and when the
    route answered a failure itself (``REQUEST_FAILED``)."""
    yield from session_scope(request.app.state.session_factory,
                             failed=lambda: bool(request.scope.get(REQUEST_FAILED)))


# scope="function": the commit runs when the handler returns, before the response is sent,
# so a client never sees a 202 for a submission that was not committed.
SessionDep = Annotated[Session, Depends(get_db_session, scope="function")]


def get_now() -> dt.datetime:
    """The time of the request (aware UTC): deadlines, lateness and audit stamps use it."""
    return utc_now()


NowDep = Annotated[dt.datetime, Depends(get_now)]

_bearer_scheme = HTTPBearer(auto_error=False,
                            description="a student's, a TA's or an instructor's token")

#: Roles of a principal.
STUDENT, TA, INSTRUCTOR = "student", StaffRole.TA.value, StaffRole.INSTRUCTOR.value


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: one student, one staff member (TA or instructor), or the
    bootstrap instructor of ``GRADER_INSTRUCTOR_TOKEN`` (``role`` instructor, no row)."""

    role: str
    student: Student | None = None
    staff: StaffMember | None = None

    @property
    def is_staff(self) -> bool:
        """True for TAs and instructors (who may read everything)."""
        return self.role in (TA, INSTRUCTOR)

    @property
    def is_instructor(self) -> bool:
        """True for instructors (settings, tokens, accounts, final runs)."""
        return self.role == INSTRUCTOR

    @property
    def student_id(self) -> int | None:
        """The caller's student id, or None for staff (who may see everything)."""
        return None if self.student is None else self.student.id

    @property
    def idempotency_scope(self) -> str:
        """Whose Idempotency-Keys these are: ``student:<id>``, ``staff:<id>`` or
        ``instructor`` (the bootstrap token)."""
        if self.student is not None:
            return f"student:{self.student.id}"
        if self.staff is not None:
            return f"staff:{self.staff.id}"
        return "instructor"

    @property
    def actor(self) -> audit.Actor:
        """Who this is in the audit log."""
        if self.staff is not None:
            return staff.actor_for(self.staff)
        if self.student is not None:
            return audit.Actor(kind=STUDENT, name=self.student.name)
        return audit.BOOTSTRAP_INSTRUCTOR


def get_principal(
    session: SessionDep,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
) -> Principal:
    """Resolve the bearer token. Raises NotAuthenticated (401)."""
    if credentials is None or not credentials.credentials:
        raise NotAuthenticated("missing bearer token (Authorization: Bearer <token>)")
    return principal_for_token(session, token=credentials.credentials, settings=settings)


def principal_for_token(session: Session, *, token: str, settings: Settings) -> Principal:
    """Whose `token` is: the bootstrap instructor's, a staff member's or a student's (the
    API's bearer token and the pages' session cookie both resolve here). Raises
    NotAuthenticated (401)."""
    if service.tokens_equal(token, settings.instructor_token.get_secret_value()):
        return Principal(role=INSTRUCTOR)
    if token.startswith(LTI_SESSION_PREFIX):
        return _lti_session_principal(session, token=token)
    member = staff.authenticate_staff(session, token=token)
    if member is not None:
        return Principal(role=member.role, staff=member)
    student = service.authenticate_student(session, token=token)
    if student is None:
        raise NotAuthenticated("invalid token")
    return Principal(role=STUDENT, student=student)


def _lti_session_principal(session: Session, *, token: str) -> Principal:
    """The person an LTI launch signed in (submissions/lti/launch.py; the pages' cookie holds
    a ``gls_`` session token). Raises NotAuthenticated (401) once it expired."""
    row = repository.find_lti_session(session, token_sha256=service.hash_token(token),
                                      now=utc_now())
    if row is not None and row.student_id is not None:
        student = repository.get_student(session, student_id=row.student_id)
        if student is not None:
            return Principal(role=STUDENT, student=student)
    if row is not None and row.staff_id is not None:
        member = repository.get_staff_member(session, staff_id=row.staff_id)
        if member is not None:
            return Principal(role=member.role, staff=member)
    raise NotAuthenticated("this LMS session has expired; open the link in the LMS again")


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


async def get_bearer_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
) -> str:
    """The bearer token, unchecked (async: no thread, no session; the long-poll checks it
    itself). Raises NotAuthenticated (401) when there is none."""
    if credentials is None or not credentials.credentials:
        raise NotAuthenticated("missing bearer token (Authorization: Bearer <token>)")
    return credentials.credentials


BearerToken = Annotated[str, Depends(get_bearer_token)]


def get_current_student(principal: CurrentPrincipal) -> Student:
    """The calling student. Raises StudentRequired (403) for staff."""
    if principal.student is None:
        raise StudentRequired("this endpoint needs a student token")
    return principal.student


CurrentStudent = Annotated[Student, Depends(get_current_student)]


def require_staff(principal: CurrentPrincipal) -> Principal:
    """A TA or an instructor. Raises StaffRequired (403) for a student."""
    if not principal.is_staff:
        raise StaffRequired("this endpoint needs a TA's or an instructor's token")
    return principal


StaffOnly = Annotated[Principal, Depends(require_staff)]


def require_instructor(principal: CurrentPrincipal) -> Principal:
    """An instructor. Raises InstructorRequired (403) for a student or a TA."""
    if not principal.is_instructor:
        raise InstructorRequired("this endpoint needs an instructor's token")
    return principal


InstructorOnly = Annotated[Principal, Depends(require_instructor)]


IdempotencyKeyDep = Annotated[str | None, Header(
    alias="Idempotency-Key", min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$",
    description="one value (e.g. a random UUID) per logical request, the same on every retry "
    "of it: a retry gets the first answer again instead of creating a second row; the same key "
    "with another request is a 422 `idempotency_key_reused`. Kept 24 h.")]
