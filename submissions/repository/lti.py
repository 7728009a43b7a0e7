"""LTI 1.3 (docs/lms.md): registrations, the tool's keys, login states and used nonces,
identities, contexts, memberships, resource links, line items, score syncs, launch sessions.

Concurrency: the single-use rows (a login state, a nonce) are consumed by a DELETE or an
INSERT whose row count says who won, so two requests replaying one launch at once cannot
both pass. Rows created on first sight (an identity, a context, a line item, a score sync)
are inserted in a savepoint; the loser of a race reads the winner's row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import delete, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from submissions.models import (
    Base,
    LtiContext,
    LtiIdentity,
    LtiLineItem,
    LtiLoginState,
    LtiMembership,
    LtiRegistration,
    LtiResourceLink,
    LtiScoreState,
    LtiScoreSync,
    LtiSession,
    LtiToolKey,
    LtiUsedNonce,
)

__all__ = [
    "delete_lti_registration",
    "find_lti_context",
    "find_lti_identity",
    "find_lti_registrations",
    "find_lti_resource_link",
    "lti_resource_link_line_item",
    "get_lti_context",
    "get_lti_line_item",
    "get_lti_registration",
    "get_lti_score_sync",
    "insert_lti_login_state",
    "insert_lti_registration",
    "insert_lti_session",
    "insert_lti_tool_key",
    "insert_or_get",
    "list_due_lti_score_syncs",
    "list_lti_contexts",
    "list_lti_memberships",
    "list_lti_registrations",
    "list_lti_score_syncs",
    "list_lti_tool_keys",
    "lti_identities_of_students",
    "lti_linked_assignments",
    "lti_student_identity",
    "find_lti_session",
    "retire_lti_tool_keys",
    "take_lti_login_state",
    "use_lti_nonce",
]

Row = TypeVar("Row", bound=Base)


def insert_or_get(session: Session, row: Row, find: Any) -> tuple[Row, bool]:
    """Insert `row` in a savepoint; on a unique-index conflict return ``find()`` (the row a
    concurrent writer inserted) instead. Returns (row, created)."""
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        existing = find()
        if existing is None:
            raise
        return existing, False
    return row, True


# ------------------------------------------------------------------------ registrations


def insert_lti_registration(session: Session, **fields: Any) -> LtiRegistration | None:
    """A new registration (flushed); None when the issuer already has this client id."""
    row = LtiRegistration(**fields)
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        return None
    return row


def list_lti_registrations(session: Session) -> Sequence[LtiRegistration]:
    return session.scalars(select(LtiRegistration).order_by(LtiRegistration.id)).all()


def get_lti_registration(session: Session, *, registration_id: int) -> LtiRegistration | None:
    return session.get(LtiRegistration, registration_id)


def find_lti_registrations(session: Session, *, issuer: str,
                           client_id: str | None) -> Sequence[LtiRegistration]:
    """The registrations of `issuer` (only the one of `client_id` when given)."""
    query = select(LtiRegistration).where(LtiRegistration.issuer == issuer)
    if client_id:
        query = query.where(LtiRegistration.client_id == client_id)
    return session.scalars(query.order_by(LtiRegistration.id)).all()


def delete_lti_registration(session: Session, *, registration_id: int) -> bool:
    """Delete a registration and (cascade) everything learned through it."""
    return bool(session.execute(delete(LtiRegistration).where(
        LtiRegistration.id == registration_id)).rowcount)


# ------------------------------------------------------------------------ tool keys


def list_lti_tool_keys(session: Session) -> Sequence[LtiToolKey]:
    """Every tool key, newest first."""
    return session.scalars(select(LtiToolKey).order_by(LtiToolKey.created_at.desc(),
                                                       LtiToolKey.kid)).all()


def insert_lti_tool_key(session: Session, *, kid: str, private_key_pem: str,
                        now: dt.datetime) -> LtiToolKey:
    row = LtiToolKey(kid=kid, private_key_pem=private_key_pem, created_at=now)
    session.add(row)
    session.flush()
    return row


def retire_lti_tool_keys(session: Session, *, keep_kid: str, now: dt.datetime) -> int:
    """Retire every unretired key but `keep_kid`; returns how many."""
    keys = session.scalars(select(LtiToolKey).where(LtiToolKey.kid != keep_kid,
                                                    LtiToolKey.retired_at.is_(None))).all()
    for key in keys:
        key.retired_at = now
    session.flush()
    return len(keys)


# ------------------------------------------------------------- login states and nonces


def insert_lti_login_state(session: Session, *, state: str, nonce: str, registration_id: int,
                           expires_at: dt.datetime) -> None:
    session.add(LtiLoginState(state=state, nonce=nonce, registration_id=registration_id,
                              expires_at=expires_at))
    session.flush()


def take_lti_login_state(session: Session, *, state: str,
                         now: dt.datetime) -> LtiLoginState | None:
    """Consume a login state: the row if it existed and had not expired, deleted so that it
    is used once (the DELETE's row count decides between two concurrent launches)."""
    row = session.get(LtiLoginState, state)
    if row is None:
        return None
    found = LtiLoginState(state=row.state, nonce=row.nonce, registration_id=row.registration_id,
                          expires_at=row.expires_at)
    session.expunge(row)
    taken = session.execute(delete(LtiLoginState).where(LtiLoginState.state == state)).rowcount
    session.execute(delete(LtiLoginState).where(LtiLoginState.expires_at < now))
    if not taken or found.expires_at < now:
        return None
    return found


def use_lti_nonce(session: Session, *, nonce_sha256: str, expires_at: dt.datetime,
                  now: dt.datetime) -> bool:
    """Record a launch's nonce; False when it was used before (a replay)."""
    session.execute(delete(LtiUsedNonce).where(LtiUsedNonce.expires_at < now))
    try:
        with session.begin_nested():
            session.add(LtiUsedNonce(nonce_sha256=nonce_sha256, expires_at=expires_at))
    except IntegrityError:
        return False
    return True


# ------------------------------------------------------------------- people and contexts


def find_lti_identity(session: Session, *, registration_id: int, sub: str) -> LtiIdentity | None:
    return session.scalars(select(LtiIdentity).where(
        LtiIdentity.registration_id == registration_id, LtiIdentity.sub == sub)).first()


def lti_student_identity(session: Session, *, student_id: int) -> LtiIdentity | None:
    """The (first) platform identity of a student, or None."""
    return session.scalars(select(LtiIdentity).where(LtiIdentity.student_id == student_id)
                           .order_by(LtiIdentity.id)).first()


def lti_identities_of_students(session: Session) -> dict[int, LtiIdentity]:
    """student id -> their first platform identity."""
    out: dict[int, LtiIdentity] = {}
    for row in session.scalars(select(LtiIdentity).where(LtiIdentity.student_id.is_not(None))
                               .order_by(LtiIdentity.id)):
        out.setdefault(row.student_id, row)  # type: ignore[arg-type]
    return out


def find_lti_context(session: Session, *, registration_id: int,
                     context_id: str) -> LtiContext | None:
    return session.scalars(select(LtiContext).where(
        LtiContext.registration_id == registration_id,
        LtiContext.context_id == context_id)).first()


def get_lti_context(session: Session, *, context_row_id: int) -> LtiContext | None:
    return session.get(LtiContext, context_row_id)


def list_lti_contexts(session: Session) -> Sequence[LtiContext]:
    return session.scalars(select(LtiContext).order_by(LtiContext.id)).all()


def list_lti_memberships(session: Session, *, context_row_id: int
                         ) -> Sequence[tuple[LtiMembership, LtiIdentity]]:
    """A context's memberships with their identities, in identity order."""
    return session.execute(
        select(LtiMembership, LtiIdentity).join(LtiIdentity,
                                                LtiIdentity.id == LtiMembership.identity_id)
        .where(LtiMembership.context_row_id == context_row_id).order_by(LtiIdentity.id)
    ).all()  # type: ignore[return-value]


def lti_linked_assignments(session: Session, *, context_row_id: int) -> list[str]:
    """The assignments a context has links to, or line items for, sorted."""
    linked = set(session.scalars(select(LtiResourceLink.assignment).where(
        LtiResourceLink.context_row_id == context_row_id)))
    linked |= set(session.scalars(select(LtiLineItem.assignment).where(
        LtiLineItem.context_row_id == context_row_id)))
    return sorted(linked)


def find_lti_resource_link(session: Session, *, context_row_id: int,
                           resource_link_id: str) -> LtiResourceLink | None:
    return session.scalars(select(LtiResourceLink).where(
        LtiResourceLink.context_row_id == context_row_id,
        LtiResourceLink.resource_link_id == resource_link_id)).first()


def lti_resource_link_line_item(session: Session, *, context_row_id: int,
                                assignment: str) -> str | None:
    """A line item URL the platform gave with a link to `assignment` (Deep Linking's
    lineItem, or a platform that makes one per link), or None."""
    return session.scalars(select(LtiResourceLink.lineitem_url).where(
        LtiResourceLink.context_row_id == context_row_id,
        LtiResourceLink.assignment == assignment,
        LtiResourceLink.lineitem_url.is_not(None)).order_by(LtiResourceLink.id)).first()


def get_lti_line_item(session: Session, *, context_row_id: int,
                      assignment: str) -> LtiLineItem | None:
    return session.scalars(select(LtiLineItem).where(
        LtiLineItem.context_row_id == context_row_id,
        LtiLineItem.assignment == assignment)).first()


# ------------------------------------------------------------------------ score syncs


def get_lti_score_sync(session: Session, *, context_row_id: int, assignment: str,
                       student_id: int) -> LtiScoreSync | None:
    return session.scalars(select(LtiScoreSync).where(
        LtiScoreSync.context_row_id == context_row_id, LtiScoreSync.assignment == assignment,
        LtiScoreSync.student_id == student_id)).first()


def list_lti_score_syncs(session: Session, *, context_row_id: int | None = None
                         ) -> Sequence[LtiScoreSync]:
    query = select(LtiScoreSync)
    if context_row_id is not None:
        query = query.where(LtiScoreSync.context_row_id == context_row_id)
    return session.scalars(query.order_by(LtiScoreSync.context_row_id, LtiScoreSync.assignment,
                                          LtiScoreSync.student_id)).all()


def list_due_lti_score_syncs(session: Session, *, now: dt.datetime,
                             limit: int = 500) -> Sequence[LtiScoreSync]:
    """Pending and failed syncs whose next attempt is due, oldest first."""
    return session.scalars(select(LtiScoreSync).where(
        LtiScoreSync.state.in_((LtiScoreState.PENDING, LtiScoreState.FAILED)),
        or_(LtiScoreSync.next_attempt_at.is_(None), LtiScoreSync.next_attempt_at <= now),
    ).order_by(LtiScoreSync.updated_at, LtiScoreSync.id).limit(limit)).all()


# ------------------------------------------------------------------------ sessions


def insert_lti_session(session: Session, *, token_sha256: str, student_id: int | None,
                       staff_id: int | None, now: dt.datetime, expires_at: dt.datetime) -> None:
    session.execute(delete(LtiSession).where(LtiSession.expires_at < now))
    session.add(LtiSession(token_sha256=token_sha256, student_id=student_id, staff_id=staff_id,
                           created_at=now, expires_at=expires_at))
    session.flush()


def find_lti_session(session: Session, *, token_sha256: str,
                     now: dt.datetime) -> LtiSession | None:
    """The unexpired launch session of this token hash, or None."""
    row = session.get(LtiSession, token_sha256)
    if row is None or row.expires_at < now:
        return None
    return row
