"""The audit log of staff actions (read by staff)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import SessionDep, StaffOnly
from api.params import Offset
from api.schemas import AuditEventRead, AuditLog, StoredText
from submissions import repository

router = APIRouter(prefix="/api/v1/audit", tags=["audit"])


@router.get("", response_model=AuditLog)
def list_audit_events(
    _: StaffOnly,
    session: SessionDep,
    action: Annotated[StoredText | None, Query(max_length=64, description="e.g. submission.disqualify")] = None,
    assignment: Annotated[StoredText | None, Query(max_length=100)] = None,
    target_type: Annotated[StoredText | None, Query(max_length=32)] = None,
    target_id: Annotated[StoredText | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    offset: Offset = 0,
) -> AuditLog:
    """Who did what, when: every staff action, newest first."""
    events = repository.list_audit_events(
        session, limit=limit, offset=offset, action=action, assignment=assignment,
        target_type=target_type, target_id=target_id)
    return AuditLog(events=[
        AuditEventRead(
            id=e.id, created_at=e.created_at, actor_kind=e.actor_kind, actor_name=e.actor_name,
            actor_staff_id=e.actor_staff_id, action=e.action, target_type=e.target_type,
            target_id=e.target_id, assignment=e.assignment, details=e.details)
        for e in events
    ])
