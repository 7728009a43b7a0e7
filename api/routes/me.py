"""The caller: who the token belongs to, and rotating one's own token."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import STUDENT, CurrentPrincipal, NowDep, SessionDep
from api.routes.students import slip_days_read
from api.schemas import ErrorResponse, Me, SlipDaysRead, TokenIssued
from submissions import service, slip_days, staff
from submissions.errors import StudentRequired, TokenNotRotatable

router = APIRouter(prefix="/api/v1/me", tags=["me"])


@router.get("", response_model=Me)
def read_me(principal: CurrentPrincipal) -> Me:
    """The role, id and name of the token's owner."""
    if principal.student is not None:
        return Me(role=STUDENT, id=principal.student.id, name=principal.student.name)
    if principal.staff is not None:
        return Me(role=principal.role, id=principal.staff.id, name=principal.staff.name)
    return Me(role=principal.role, id=None, name=principal.actor.name)


@router.get("/slip-days", response_model=SlipDaysRead,
            responses={403: {"model": ErrorResponse, "description": "not a student (student_required)"}})
def read_my_slip_days(principal: CurrentPrincipal, session: SessionDep) -> SlipDaysRead:
    """The calling student's slip days for the term (budget, spent, left)."""
    if principal.student is None:
        raise StudentRequired("slip days belong to students; staff read GET /api/v1/students/{id}/slip-days")
    return slip_days_read(principal.student.id,
                          slip_days.account(session, student_id=principal.student.id))


@router.post("/token", response_model=TokenIssued,
             responses={409: {"model": ErrorResponse,
                              "description": "the bootstrap instructor (token_not_rotatable)"}})
def rotate_my_token(principal: CurrentPrincipal, session: SessionDep, now: NowDep) -> TokenIssued:
    """Replace the caller's own token (e.g. after it leaked): the answer carries the new
    one; the old one stops working at once. The bootstrap instructor's token is the
    GRADER_INSTRUCTOR_TOKEN setting: change that instead."""
    actor = principal.actor
    if principal.student is not None:
        issued = service.rotate_student_token(session, student_id=principal.student.id,
                                              actor=actor, now=now)
        return TokenIssued(kind="student", id=issued.student.id, name=issued.student.name,
                           token=issued.token)
    if principal.staff is not None:
        rotated = staff.rotate_staff_token(session, staff_id=principal.staff.id, actor=actor,
                                           now=now)
        return TokenIssued(kind="staff", id=rotated.member.id, name=rotated.member.name,
                           token=rotated.token)
    raise TokenNotRotatable("the bootstrap instructor's token is GRADER_INSTRUCTOR_TOKEN; "
                            "change the setting and restart the service")
