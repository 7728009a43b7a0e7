"""API schemas of the LMS integration (docs/lms.md): registrations, the tool's settings to
paste into an LMS, each course's roster sync, each student's score sync state."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from submissions import repository
from submissions.lti import people
from submissions.models import LtiRegistration


class LtiRegistrationCreate(BaseModel):
    """A platform as its LMS admin page shows it."""

    issuer: str = Field(min_length=1, max_length=500, description="the platform's `iss`")
    client_id: str = Field(min_length=1, max_length=255)
    deployment_ids: list[str] = Field(min_length=1, max_length=50)
    auth_login_url: str = Field(max_length=1000, description="the OIDC authorisation endpoint")
    auth_token_url: str = Field(max_length=1000, description="the OAuth2 token endpoint")
    keyset_url: str = Field(max_length=1000, description="the platform's JWKS URL")
    auth_audience: str | None = Field(None, max_length=1000)


class LtiRegistrationRead(BaseModel):
    id: int
    issuer: str
    client_id: str
    deployment_ids: list[str]
    auth_login_url: str
    auth_token_url: str
    keyset_url: str
    auth_audience: str | None
    created_at: dt.datetime
    created_by: str

    @classmethod
    def of(cls, row: LtiRegistration) -> LtiRegistrationRead:
        return cls.model_validate(row, from_attributes=True)


class LtiMemberRead(BaseModel):
    """One person of a course as the LMS roster knows them."""

    sub: str
    name: str | None
    role: str
    status: str = Field(description="`active` or `dropped`")
    student_id: int | None
    changed_at: dt.datetime


class LtiContextRead(BaseModel):
    """An LMS course: its endpoints and its last roster sync (what changed)."""

    id: int
    registration_id: int
    context_id: str
    title: str | None
    roster_endpoint: bool
    line_items_endpoint: bool
    roster_synced_at: dt.datetime | None
    roster_changes: dict[str, Any] | None
    roster_error: str | None
    members: list[LtiMemberRead]


class LtiScoreSyncRead(BaseModel):
    """One student's score sync to one course's line item."""

    context_id: int
    assignment: str
    student_id: int
    student_name: str
    state: str = Field(description="pending, synced, failed or no_identity")
    score_given: float | None
    score_maximum: float | None
    synced_score: float | None
    attempts: int
    next_attempt_at: dt.datetime | None
    last_error: str | None
    synced_at: dt.datetime | None


class LtiStatus(BaseModel):
    registrations: list[LtiRegistrationRead]
    contexts: list[LtiContextRead]
    scores: list[LtiScoreSyncRead]


class LtiSyncRead(BaseModel):
    """What one sync run did."""

    rosters: dict[int, dict[str, Any]]
    roster_errors: dict[int, str]
    made_pending: int
    sent: int
    failed: dict[int, str]


def lti_status(session: Session) -> LtiStatus:
    """Everything staff see of the LMS integration (the API and the /lti page)."""
    names = {s.id: s.name for s in repository.list_students(session)}
    contexts = []
    for context in repository.list_lti_contexts(session):
        members = [LtiMemberRead(sub=identity.sub, name=names.get(identity.student_id or 0)
                                 or identity.name, role=membership.role,
                                 status=membership.status, student_id=identity.student_id,
                                 changed_at=membership.changed_at)
                   for membership, identity in repository.list_lti_memberships(
                       session, context_row_id=context.id)]
        contexts.append(LtiContextRead(
            id=context.id, registration_id=context.registration_id, context_id=context.context_id,
            title=context.title, roster_endpoint=bool(context.memberships_url),
            line_items_endpoint=bool(context.lineitems_url),
            roster_synced_at=context.roster_synced_at, roster_changes=context.roster_changes,
            roster_error=context.roster_error, members=members))
    scores = [LtiScoreSyncRead(
        context_id=row.context_row_id, assignment=row.assignment, student_id=row.student_id,
        student_name=names.get(row.student_id, "?"), state=row.state,
        score_given=row.score_given, score_maximum=row.score_maximum,
        synced_score=row.synced_score, attempts=row.attempts,
        next_attempt_at=row.next_attempt_at, last_error=row.last_error,
        synced_at=row.synced_at) for row in repository.list_lti_score_syncs(session)]
    return LtiStatus(registrations=[LtiRegistrationRead.of(r) for r in
                                    repository.list_lti_registrations(session)],
                     contexts=contexts, scores=scores)


def dropped_student_ids(session: Session) -> set[int]:
    """Students every LMS course that lists them has marked dropped."""
    active: set[int] = set()
    dropped: set[int] = set()
    for context in repository.list_lti_contexts(session):
        for membership, identity in repository.list_lti_memberships(session,
                                                                    context_row_id=context.id):
            if identity.student_id is None or membership.role != people.STUDENT:
                continue
            (dropped if membership.status == people.DROPPED else active).add(identity.student_id)
    return dropped - active
