"""Students: created by the instructor, each with a bearer token shown once."""

from __future__ import annotations

from fastapi import APIRouter, status
from api.deps import InstructorOnly, SessionDep
from api.schemas import ErrorResponse, StudentCreate, StudentCreated, StudentRead
from submissions import repository, service
from submissions.models import utc_now

router = APIRouter(prefix="/api/v1/students", tags=["students"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=StudentCreated,
             responses={409: {"model": ErrorResponse, "description": "name taken "
                              "(student_name_taken; compared trimmed, ignoring case)"},
                        422: {"model": ErrorResponse, "description": "blank name"}})
def create_student(body: StudentCreate, session: SessionDep, _: InstructorOnly) -> StudentCreated:
    """Create a student and return their token (only a hash of it is stored). Names are
    unique ignoring case and surrounding spaces: a duplicate is refused with 409."""
    created = service.create_student(session, name=body.name, now=utc_now())
    return StudentCreated(id=created.student.id, name=created.student.name, token=created.token)


@router.get("", response_model=list[StudentRead])
def list_students(session: SessionDep, _: InstructorOnly) -> list[StudentRead]:
    """All students (instructor only)."""
    students = repository.list_students(session)
    return [StudentRead(id=s.id, name=s.name, created_at=s.created_at) for s in students]
