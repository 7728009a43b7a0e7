"""Staff members (instructors and TAs): insertion, lookups, token updates."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from submissions.models import StaffMember

__all__ = [
    "find_staff_by_name_key",
    "find_staff_by_token_sha256",
    "get_staff_member",
    "insert_staff_member",
    "list_staff_members",
    "update_staff_token",
]


def insert_staff_member(
    session: Session, *, name: str, name_key: str, role: str, token_sha256: str,
    now: dt.datetime,
) -> StaffMember | None:
    """Insert a staff member; flushes to assign the id. Returns None, inserting nothing,
    when the name is taken (unique index; the session stays usable: savepoint)."""
    member = StaffMember(name=name, name_key=name_key, role=role, token_sha256=token_sha256,
                         created_at=now)
    try:
        with session.begin_nested():
            session.add(member)
    except IntegrityError:
        if find_staff_by_name_key(session, name_key=name_key) is None:
            raise
        return None
    return member


def find_staff_by_name_key(session: Session, *, name_key: str) -> StaffMember | None:
    """The staff member with this normalised name, or None."""
    return session.scalars(select(StaffMember).where(StaffMember.name_key == name_key)).first()


def find_staff_by_token_sha256(session: Session, *, token_sha256: str) -> StaffMember | None:
    """The staff member whose token hashes to `token_sha256` (unique), or None."""
    return session.scalars(
        select(StaffMember).where(StaffMember.token_sha256 == token_sha256)
    ).first()


def get_staff_member(session: Session, *, staff_id: int) -> StaffMember | None:
    """The staff member with id `staff_id`, or None."""
    return session.get(StaffMember, staff_id)


def list_staff_members(session: Session) -> Sequence[StaffMember]:
    """All staff members, in creation order."""
    return session.scalars(select(StaffMember).order_by(StaffMember.id)).all()


def update_staff_token(
    session: Session, *, staff_id: int, token_sha256: str, now: dt.datetime
) -> bool:
    """Replace a staff member's token hash. Returns False when there is no such member."""
    result = session.execute(
        update(StaffMember)
        .where(StaffMember.id == staff_id)
        .values(token_sha256=token_sha256, token_rotated_at=now)
        .execution_options(synchronize_session="fetch")
    )
    return result.rowcount == 1
