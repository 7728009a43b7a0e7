"""The people a platform launches or lists, by its stable ``sub`` (never by name): their
identity row, the student or staff account made for them, their membership of a context.

Roles (LIS vocabulary, LTI 1.3 section 5.3.7): a Teaching Assistant is a ``ta``; an
Instructor or a context Administrator an ``instructor``; a Learner a student. A person with
none of them is refused (a launch) or left out (a roster sync). Accounts are made on first
sight and named as the platform names them (a clash with another account's name adds a part
of the ``sub``); an e-mail already on another student is left off rather than merged.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sqlalchemy.orm import Session

from submissions import audit, repository, service, staff
from submissions.errors import (
    StaffNameTaken,
    StudentEmailTaken,
    StudentExternalIdTaken,
    StudentFieldInvalid,
    StudentNameInvalid,
    StudentNameTaken,
)
from submissions.models import (
    LtiContext,
    LtiIdentity,
    LtiMembership,
    LtiRegistration,
    StaffRole,
)

LIS = "http://purl.imsglobal.org/vocab/lis/v2/"
ROLE_LEARNER = LIS + "membership#Learner"
ROLE_INSTRUCTOR = LIS + "membership#Instructor"
ROLE_TA = LIS + "membership/Instructor#TeachingAssistant"
ROLE_ADMINISTRATOR = LIS + "membership#Administrator"

STUDENT, TA, INSTRUCTOR = "student", StaffRole.TA.value, StaffRole.INSTRUCTOR.value
ACTIVE, DROPPED = "active", "dropped"


def role_of(roles: Iterable[str]) -> str | None:
    """``ta``, ``instructor``, ``student`` or None, from a roles claim (full URIs or the
    simple names of LTI 1.3's deprecated short form)."""
    names = {r.strip() for r in roles if isinstance(r, str)}
    simple = {r.rsplit("#", 1)[-1] for r in names if r.startswith(LIS) or "#" not in r}
    if ROLE_TA in names or "TeachingAssistant" in simple:
        return TA
    if names & {ROLE_INSTRUCTOR, ROLE_ADMINISTRATOR} or {"Instructor", "Administrator"} & simple:
        return INSTRUCTOR
    if ROLE_LEARNER in names or any(r.startswith(LIS + "membership/Learner#") for r in names) \
            or "Learner" in simple:
        return STUDENT
    return None


def lti_actor(registration: LtiRegistration) -> audit.Actor:
    """Who acts when a platform's launch or roster creates an account."""
    return audit.Actor(kind="lti", name=f"LMS {registration.issuer}"[:200])


def display_name(sub: str, name: str | None, email: str | None) -> str:
    """What to call a person: the platform's name, else the e-mail's local part, else a
    stable label from the sub."""
    for candidate in (name, (email or "").split("@")[0]):
        if candidate and candidate.strip():
            return candidate.strip()[:150]
    return f"LMS user {sub[:12]}"


def _names(base: str, sub: str) -> list[str]:
    return [base, f"{base} ({sub[:12]})", f"{base} ({sub[:40]})"]


def _make_student(session: Session, *, registration: LtiRegistration, sub: str, name: str,
                  email: str | None, now: dt.datetime) -> int:
    actor = lti_actor(registration)
    for candidate in _names(name, sub):
        for mail in (email, None):
            try:
                return service.create_student(session, name=candidate, now=now, email=mail,
                                              actor=actor).student.id
            except (StudentEmailTaken, StudentFieldInvalid, StudentExternalIdTaken):
                continue
            except (StudentNameTaken, StudentNameInvalid):
                break
    return service.create_student(session, name=f"LMS user {sub[:60]}", now=now,
                                  actor=actor).student.id


def _make_staff(session: Session, *, registration: LtiRegistration, sub: str, name: str,
                role: str, now: dt.datetime) -> int:
    actor = lti_actor(registration)
    for candidate in _names(name, sub):
        try:
            return staff.create_staff_member(session, name=candidate, role=StaffRole(role),
                                             actor=actor, now=now).member.id
        except (StaffNameTaken, StudentNameInvalid):
            continue
    return staff.create_staff_member(session, name=f"LMS staff {sub[:60]}", role=StaffRole(role),
                                     actor=actor, now=now).member.id


def provision(session: Session, *, registration: LtiRegistration, sub: str, role: str,
              name: str | None, email: str | None, now: dt.datetime) -> tuple[LtiIdentity, bool]:
    """The identity of `sub` with the account its `role` needs (made on first sight; a
    staff account's role follows the platform's). Returns (identity, account created)."""
    identity = repository.find_lti_identity(session, registration_id=registration.id, sub=sub)
    if identity is None:
        identity, _ = repository.insert_or_get(
            session, LtiIdentity(registration_id=registration.id, sub=sub, created_at=now,
                                 last_seen_at=now),
            lambda: repository.find_lti_identity(session, registration_id=registration.id,
                                                 sub=sub))
    if name:
        identity.name = name[:200]
    if email:
        identity.email = email[:320]
    identity.last_seen_at = now
    created = False
    label = display_name(sub, name, email)
    if role == STUDENT and identity.student_id is None:
        identity.student_id = _make_student(session, registration=registration, sub=sub,
                                            name=label, email=email, now=now)
        created = True
    elif role in (TA, INSTRUCTOR):
        member = (repository.get_staff_member(session, staff_id=identity.staff_id)
                  if identity.staff_id is not None else None)
        if member is None:
            identity.staff_id = _make_staff(session, registration=registration, sub=sub,
                                            name=label, role=role, now=now)
            created = True
        elif member.role != role:
            member.role = role
    session.flush()
    return identity, created


def set_membership(session: Session, *, context: LtiContext, identity: LtiIdentity, role: str,
                   status: str, now: dt.datetime) -> tuple[LtiMembership, str | None]:
    """Record that `identity` is (``active``) or is no longer (``dropped``) a member of
    `context` with `role`. Returns (membership, previous status or None when new)."""
    rows = {m.identity_id: m for m, _ in
            repository.list_lti_memberships(session, context_row_id=context.id)}
    membership = rows.get(identity.id)
    if membership is None:
        membership, _ = repository.insert_or_get(
            session, LtiMembership(context_row_id=context.id, identity_id=identity.id,
                                   role=role, status=status, changed_at=now),
            lambda: next((m for m, _ in repository.list_lti_memberships(
                session, context_row_id=context.id) if m.identity_id == identity.id), None))
        return membership, None
    previous = membership.status
    if previous != status:
        membership.changed_at = now
    membership.status, membership.role = status, role
    session.flush()
    return membership, previous
