"""Typed FastAPI dependencies. Handlers never build a session or parse a token themselves.

- `SettingsDep`: the one `Settings` object, kept on ``app.state``.
- `SessionDep`: a database session whose transaction belongs to the request: committed after
  the handler returns (before the response is sent), rolled back if it raises.
- `CurrentPrincipal`: who is calling (a student or the instructor), from the bearer token.
- `CurrentStudent`: a student (401 without a valid token, 403 for the instructor).
- `InstructorOnly`: the instructor (401 without a valid token, 403 for a student).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from submissions import service
from submissions.errors import InstructorRequired, NotAuthenticated, StudentRequired
from submissions.models import Student
from submissions.settings import Settings


def get_settings(request: Request) -> Settings:
    """The settings the app was built with."""
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


def session_scope(session_factory: Callable[[], Session]) -> Iterator[Session]:
    """One session from ``session_factory``: commit on success, roll back on any exception,
    close always. The transaction boundary of a request (and of the tests' override)."""
    session = session_factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def get_db_session(request: Request) -> Iterator[Session]:
    """One session per request; commit on success, roll back on any exception."""
    yield from session_scope(request.app.state.session_factory)


# scope="function": the commit runs when the handler returns, before the response is sent,
# so a client never sees a 202 for a submission that was not committed.
SessionDep = Annotated[Session, Depends(get_db_session, scope="function")]

_bearer_scheme = HTTPBearer(auto_error=False, description="student token or instructor token")


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: the instructor (``student is None``) or one student."""

    student: Student | None

    @property
    def is_instructor(self) -> bool:
        """True for the instructor token."""
        return self.student is None

    @property
    def student_id(self) -> int | None:
        """The caller's student id, or None for the instructor (who may see everything)."""
        return None if self.student is None else self.student.id


def get_principal(
    session: SessionDep,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
) -> Principal:
    """Resolve the bearer token. Raises NotAuthenticated (401)."""
    if credentials is None or not credentials.credentials:
        raise NotAuthenticated("missing bearer token (Authorization: Bearer <token>)")
    token = credentials.credentials
    if service.tokens_equal(token, settings.instructor_token.get_secret_value()):
        return Principal(student=None)
    student = service.authenticate_student(session, token=token)
    if student is None:
        raise NotAuthenticated("invalid token")
    return Principal(student=student)


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


def get_current_student(principal: CurrentPrincipal) -> Student:
    """The calling student. Raises StudentRequired (403) for the instructor."""
    if principal.student is None:
        raise StudentRequired("this endpoint needs a student token")
    return principal.student


CurrentStudent = Annotated[Student, Depends(get_current_student)]


def require_instructor(principal: CurrentPrincipal) -> Principal:
    """The instructor. Raises InstructorRequired (403) for a student."""
    if not principal.is_instructor:
        raise InstructorRequired("this endpoint needs the instructor token")
    return principal


InstructorOnly = Annotated[Principal, Depends(require_instructor)]
