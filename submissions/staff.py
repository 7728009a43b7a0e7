"""Staff accounts: instructors and TAs, each with a personal bearer token.

The bootstrap instructor is ``GRADER_INSTRUCTOR_TOKEN`` (no row): it works from the first
start (`make serve`, `docker compose up`) and creates the real accounts. Roles:

- ``instructor``: everything.
- ``ta``: read everything (students, submissions and their source, gradings, leaderboard,
  audit log, exports), regrade, disqualify and restore; no settings, no tokens, no
  accounts, no final runs.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy.orm import Session

from submissions import audit, repository
from submissions.errors import StaffNameTaken, StaffNotFound, StudentNameInvalid
from submissions.models import StaffMember, StaffRole
from submissions.service import hash_token, new_token, student_name_key

#: Prefix of staff tokens (students' are ``gst_``): a leaked token says what it opens.
STAFF_TOKEN_PREFIX = "gsf_"
MAX_STAFF_NAME_CHARS = 200


@dataclass(frozen=True)
class StaffWithToken:
    """A staff member and their new bearer token (shown once; only its hash is stored)."""

    member: StaffMember
    token: str


def create_staff_member(
    session: Session, *, name: str, role: StaffRole, actor: audit.Actor, now: dt.datetime
) -> StaffWithToken:
    """Create an instructor or TA account with a fresh token; recorded in the audit log.

    Raises:
        StudentNameInvalid: a blank or too long name (same rules as students' names).
        StaffNameTaken: another staff member has this name (trimmed, case-insensitive).
    """
    clean_name = name.strip()
    if not clean_name or len(clean_name) > MAX_STAFF_NAME_CHARS:
        raise StudentNameInvalid(
            f"a staff name must have 1 to {MAX_STAFF_NAME_CHARS} characters")
    role = StaffRole(role)
    token = new_token(STAFF_TOKEN_PREFIX)
    member = repository.insert_staff_member(
        session, name=clean_name, name_key=student_name_key(clean_name), role=role.value,
        token_sha256=hash_token(token), now=now,
    )
    if member is None:
        raise StaffNameTaken(f"a staff member named {clean_name!r} already exists")
    audit.record(session, actor=actor, action="staff.create", now=now, target_type="staff",
                 target_id=member.id, details={"name": member.name, "role": member.role})
    return StaffWithToken(member=member, token=token)


def rotate_staff_token(
    session: Session, *, staff_id: int, actor: audit.Actor, now: dt.datetime
) -> StaffWithToken:
    """Give a staff member a new token (the old one stops working at commit); audited.

    Raises:
        StaffNotFound: no such staff member.
    """
    token = new_token(STAFF_TOKEN_PREFIX)
    if not repository.update_staff_token(session, staff_id=staff_id,
                                         token_sha256=hash_token(token), now=now):
        raise StaffNotFound(f"no staff member {staff_id}")
    member = repository.get_staff_member(session, staff_id=staff_id)
    assert member is not None  # noqa: S101 - just updated in this transaction
    audit.record(session, actor=actor, action="staff.rotate_token", now=now,
                 target_type="staff", target_id=staff_id)
    return StaffWithToken(member=member, token=token)


def authenticate_staff(session: Session, *, token: str) -> StaffMember | None:
    """The staff member owning `token`, or None."""
    if not token.startswith(STAFF_TOKEN_PREFIX):
        return None
    return repository.find_staff_by_token_sha256(session, token_sha256=hash_token(token))


def actor_for(member: StaffMember) -> audit.Actor:
    """The audit actor of a staff account."""
    return audit.Actor(kind=member.role, name=member.name, staff_id=member.id)
