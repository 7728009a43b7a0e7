"""Worker heartbeats (one row per worker process, for /healthz and /metrics)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from submissions.models import WorkerHeartbeat

__all__ = ["delete_worker_heartbeat", "list_worker_heartbeats", "upsert_worker_heartbeat"]


def upsert_worker_heartbeat(
    session: Session,
    *,
    worker_id: str,
    hostname: str,
    pid: int,
    started_at: dt.datetime,
    current_submission_id: int | None,
    now: dt.datetime,
) -> None:
    """Insert or refresh the heartbeat row of `worker_id`. Only the worker that owns the id
    writes its row, so the update-then-insert pair cannot race with another writer."""
    updated = session.execute(
        update(WorkerHeartbeat)
        .where(WorkerHeartbeat.worker_id == worker_id)
        .values(last_seen_at=now, current_submission_id=current_submission_id)
        .execution_options(synchronize_session=False)
    )
    if updated.rowcount == 0:
        session.add(
            WorkerHeartbeat(
                worker_id=worker_id,
                hostname=hostname,
                pid=pid,
                started_at=started_at,
                last_seen_at=now,
                current_submission_id=current_submission_id,
            )
        )
        session.flush()


def delete_worker_heartbeat(session: Session, *, worker_id: str) -> None:
    """Remove the heartbeat row of a worker that shuts down cleanly."""
    session.execute(delete(WorkerHeartbeat).where(WorkerHeartbeat.worker_id == worker_id))


def list_worker_heartbeats(session: Session) -> Sequence[WorkerHeartbeat]:
    """All worker heartbeat rows, most recently seen first."""
    return session.scalars(
        select(WorkerHeartbeat).order_by(WorkerHeartbeat.last_seen_at.desc())
    ).all()
