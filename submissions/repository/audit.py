"""The audit log of staff actions (append-only)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from submissions.models import AuditEvent

__all__ = ["insert_audit_event", "list_audit_events"]


def insert_audit_event(
    session: Session,
    *,
    now: dt.datetime,
    actor_kind: str,
    actor_staff_id: int | None,
    actor_name: str,
    action: str,
    target_type: str | None,
    target_id: str | None,
    assignment: str | None,
    details: dict[str, Any] | None,
) -> AuditEvent:
    """Append one event; written in the same transaction as the action it records, so an
    action that is rolled back leaves no event and a committed one always has its event."""
    event = AuditEvent(
        created_at=now, actor_kind=actor_kind, actor_staff_id=actor_staff_id,
        actor_name=actor_name[:200], action=action, target_type=target_type,
        target_id=target_id, assignment=assignment, details=details,
    )
    session.add(event)
    session.flush()
    return event


def list_audit_events(
    session: Session,
    *,
    limit: int,
    offset: int,
    action: str | None = None,
    assignment: str | None = None,
    target_type: str | None = None,
    target_id: str | None = None,
) -> Sequence[AuditEvent]:
    """Events, newest first, optionally filtered."""
    statement = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit).offset(offset)
    if action is not None:
        statement = statement.where(AuditEvent.action == action)
    if assignment is not None:
        statement = statement.where(AuditEvent.assignment == assignment)
    if target_type is not None:
        statement = statement.where(AuditEvent.target_type == target_type)
    if target_id is not None:
        statement = statement.where(AuditEvent.target_id == target_id)
    return session.scalars(statement).all()
