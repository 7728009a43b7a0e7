"""Staff accounts (instructors and TAs), created by an instructor, each with a personal token."""

from __future__ import annotations

from fastapi import APIRouter, status

from api.deps import InstructorOnly, NowDep, SessionDep, StaffOnly
from api.params import StaffId
from api.schemas import ErrorResponse, StaffCreate, StaffCreated, StaffRead, TokenIssued
from submissions import repository, staff
from submissions.models import StaffMember, StaffRole

router = APIRouter(prefix="/api/v1/staff", tags=["staff"])


def _read(member: StaffMember) -> StaffRead:
    return StaffRead(id=member.id, name=member.name, role=member.role,
                     created_at=member.created_at, token_rotated_at=member.token_rotated_at)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=StaffCreated,
             responses={409: {"model": ErrorResponse, "description": "staff_name_taken"}})
def create_staff_member(body: StaffCreate, session: SessionDep, principal: InstructorOnly,
                        now: NowDep) -> StaffCreated:
    """Create an instructor or TA account; its token is shown only here."""
    created = staff.create_staff_member(session, name=body.name, role=StaffRole(body.role),
                                        actor=principal.actor, now=now)
    return StaffCreated(id=created.member.id, name=created.member.name,
                        role=created.member.role, token=created.token)


@router.get("", response_model=list[StaffRead])
def list_staff(session: SessionDep, _: StaffOnly) -> list[StaffRead]:
    """Every staff account (no tokens)."""
    return [_read(m) for m in repository.list_staff_members(session)]


@router.post("/{staff_id}/token", response_model=TokenIssued,
             responses={404: {"model": ErrorResponse}})
def rotate_staff_token(staff_id: StaffId, session: SessionDep, principal: InstructorOnly,
                       now: NowDep) -> TokenIssued:
    """Give a staff member a new token (the old one stops working at once; this is also
    how an account is revoked)."""
    rotated = staff.rotate_staff_token(session, staff_id=staff_id, actor=principal.actor,
                                       now=now)
    return TokenIssued(kind="staff", id=rotated.member.id, name=rotated.member.name,
                       token=rotated.token)
