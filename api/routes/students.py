"""Students: created by an instructor (one by one or from a roster CSV), each with a bearer
token shown once; tokens can be rotated."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, status
from fastapi.responses import JSONResponse, Response

from api import idempotent
from api.bodies import CSV_OPENAPI, CsvBody
from api.deps import IdempotencyKeyDep, InstructorOnly, NowDep, SessionDep, SettingsDep, StaffOnly
from api.params import StudentId
from api.presenters import student_read
from api.schemas import (
    ErrorResponse,
    RosterImported,
    SlipDaySpendRead,
    SlipDaysRead,
    SlipDaysUpdate,
    StudentCreate,
    StudentCreated,
    StudentRead,
    TokenIssued,
)
from submissions import idempotency, repository, roster, service, slip_days
from submissions.errors import StudentNotFound

router = APIRouter(prefix="/api/v1/students", tags=["students"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=StudentCreated,
             responses={409: {"model": ErrorResponse, "description": "name, e-mail or roster id "
                              "taken (student_name_taken: compared trimmed, ignoring case; "
                              "student_email_taken; student_external_id_taken)"},
                        422: {"model": ErrorResponse, "description": "blank name, malformed "
                              "e-mail (student_field_invalid)"}})
def create_student(body: StudentCreate, session: SessionDep, principal: InstructorOnly,
                   now: NowDep, settings: SettingsDep,
                   idempotency_key: IdempotencyKeyDep = None) -> StudentCreated | JSONResponse:
    """Create a student and return their token (only a hash of it is stored). Names are
    unique ignoring case and surrounding spaces; e-mails and roster ids are unique too.
    With an `Idempotency-Key`, a retry of the same request returns the first answer (the
    same student and token) instead of 409."""
    claim = idempotent.begin(
        session, principal=principal, key=idempotency_key, settings=settings, now=now,
        request_sha256=idempotency.fingerprint(
            "POST /api/v1/students", idempotency.canonical_json(body.model_dump(mode="json"))))
    if isinstance(claim, JSONResponse):
        return claim
    created = service.create_student(session, name=body.name, email=body.email,
                                     external_id=body.external_id, now=now,
                                     actor=principal.actor)
    student = created.student
    answer = StudentCreated(id=student.id, name=student.name, token=created.token,
                            email=student.email, external_id=student.external_id)
    idempotent.finish(session, claim, status_code=201, body=answer.model_dump(mode="json"))
    return answer


@router.get("", response_model=list[StudentRead])
def list_students(session: SessionDep, _: StaffOnly) -> list[StudentRead]:
    """All students (staff)."""
    return [student_read(s) for s in repository.list_students(session)]


@router.post(
    "/import", response_model=RosterImported, openapi_extra=CSV_OPENAPI,
    responses={200: {"content": {"text/csv": {}},
                     "description": "JSON, or with ?format=csv a CSV of "
                     "student_id,name,email,id,token (token empty for existing students)"},
               422: {"model": ErrorResponse, "description": "roster_invalid: nothing was "
                     "imported; `errors` lists every problem with its line"}},
)
def import_roster(
    text: CsvBody, session: SessionDep, principal: InstructorOnly, now: NowDep,
    format: Annotated[Literal["json", "csv"], Query()] = "json",  # noqa: A002
) -> RosterImported | Response:
    """Import a roster CSV (header `name,email,id`; e-mail and id optional; other columns
    ignored): new students are created with fresh tokens, rows matching existing students
    keep theirs. All or nothing."""
    imported = roster.import_roster(session, text=text, actor=principal.actor, now=now)
    if format == "csv":
        return Response(roster.tokens_csv(imported), media_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition": 'attachment; filename="tokens.csv"'})
    return RosterImported(
        created=[StudentCreated(id=i.student.id, name=i.student.name, token=i.token or "",
                                email=i.student.email, external_id=i.student.external_id)
                 for i in imported if i.created],
        existing=[student_read(i.student) for i in imported if not i.created],
    )


@router.get("/{student_id}", response_model=StudentRead,
            responses={404: {"model": ErrorResponse}})
def read_student(student_id: StudentId, session: SessionDep, _: StaffOnly) -> StudentRead:
    """One student (staff)."""
    student = repository.get_student(session, student_id=student_id)
    if student is None:
        raise StudentNotFound(f"no student {student_id}")
    return student_read(student)


@router.post("/{student_id}/token", response_model=TokenIssued,
             responses={404: {"model": ErrorResponse}})
def rotate_student_token(student_id: StudentId, session: SessionDep, principal: InstructorOnly,
                         now: NowDep) -> TokenIssued:
    """Give the student a new token (a lost or leaked one stops working at once)."""
    issued = service.rotate_student_token(session, student_id=student_id,
                                          actor=principal.actor, now=now)
    return TokenIssued(kind="student", id=issued.student.id, name=issued.student.name,
                       token=issued.token)


def slip_days_read(student_id: int, held: slip_days.SlipDayAccount) -> SlipDaysRead:
    """A student's slip-day account as the API carries it."""
    return SlipDaysRead(student_id=student_id, budget=held.budget, used=held.used,
                        left=held.left,
                        spent=[SlipDaySpendRead(assignment=a, submission_id=s, days=d)
                               for a, (s, d) in sorted(held.spent.items())])


@router.get("/{student_id}/slip-days", response_model=SlipDaysRead,
            responses={404: {"model": ErrorResponse, "description": "student_not_found"}})
def read_slip_days(student_id: StudentId, session: SessionDep, _: StaffOnly) -> SlipDaysRead:
    """The student's slip days for the term: budget, what is spent on which submission, left."""
    return slip_days_read(student_id, slip_days.account(session, student_id=student_id))


@router.put("/{student_id}/slip-days", response_model=SlipDaysRead,
            responses={404: {"model": ErrorResponse, "description": "student_not_found"},
                       422: {"model": ErrorResponse, "description": "slip_days_invalid"}})
def set_slip_days(student_id: StudentId, body: SlipDaysUpdate, session: SessionDep,
                  principal: InstructorOnly, now: NowDep) -> SlipDaysRead:
    """Set the student's slip-day budget for the term (audited with the reason); what is
    spent is derived again at once (submissions/slip_days.py)."""
    held = slip_days.set_budget(session, student_id=student_id, days=body.days,
                                reason=body.reason, actor=principal.actor, now=now)
    return slip_days_read(student_id, held)
