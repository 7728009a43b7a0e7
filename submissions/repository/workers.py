"""Worker heartbeats (one row per worker process, for /healthz and /metrics)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from submissions.models import FleetController, WorkerHeartbeat

__all__ = ["delete_worker_heartbeat", "list_fleet_controllers", "list_worker_heartbeats", "record_fleet_tick",
           "upsert_worker_heartbeat"]


def upsert_worker_heartbeat(
    session: Session,
    *,
    worker_id: str,
    hostname: str,
    pid: int,
    started_at: dt.datetime,
    current_submission_id: int | None,
    now: dt.datetime,
    gpu: str | None = None,
    cpus: str | None = None,
    launcher: str | None = None,
) -> None:
    """Insert or refresh the heartbeat row of `worker_id` (``gpu``, ``cpus``, ``launcher``: where
    it runs, written with the row). Only the worker that owns the id writes its row, so the
    update-then-insert pair cannot race with another writer."""
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
                gpu=gpu,
                cpus=cpus,
                launcher=launcher,
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


def record_fleet_tick(
    session: Session,
    *,
    name: str,
    scheduler: str,
    max_jobs: int,
    pending_jobs: int,
    running_jobs: int,
    queue_depth: int,
    submitted: int,
    error: str | None,
    now: dt.datetime,
) -> None:
    """Write what fleet controller ``name`` saw and did on one tick (``submitted``: jobs it
    submitted on this tick, added to its total). One controller writes its row; two
    controllers of one name would overwrite each other's counts, not corrupt them."""
    row = session.get(FleetController, name)
    if row is None:
        row = FleetController(name=name, scheduler=scheduler, max_jobs=max_jobs, pending_jobs=0, running_jobs=0,
                              queue_depth=0, submitted_total=0, last_tick_at=now)
        session.add(row)
    row.scheduler, row.max_jobs = scheduler, max_jobs
    row.pending_jobs, row.running_jobs, row.queue_depth = pending_jobs, running_jobs, queue_depth
    row.submitted_total += submitted
    row.last_error, row.last_tick_at = error, now
    session.flush()


def list_fleet_controllers(session: Session) -> Sequence[FleetController]:
    """Every fleet controller's last tick, by name."""
    return session.scalars(select(FleetController).order_by(FleetController.name)).all()
