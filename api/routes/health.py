"""Liveness/readiness (`/healthz`) and Prometheus metrics (`/metrics`)."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from api.deps import SessionDep, SettingsDep
from api.errors import DATABASE_RETRY_AFTER_S
from api.metrics import build_registry
from api.schemas import FleetHealth, Health, WorkerHealth
from submissions import repository
from submissions.models import utc_now

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}})
def read_health(session: SessionDep, settings: SettingsDep) -> Health | JSONResponse:
    """200 when the database answers (`status` is `degraded` when no worker has sent a
    heartbeat recently); 503 when the database is unreachable, with ``Retry-After``.

    A worker is `alive` while its last heartbeat is younger than
    ``settings.worker_stale_after`` (3 heartbeat intervals unless configured), so a killed
    worker shows as dead within 3 heartbeats."""
    cutoff = utc_now() - dt.timedelta(seconds=settings.worker_stale_after)
    try:
        repository.ping(session)
        queue_depth = repository.count_queued_gradings(session)
        heartbeats = repository.list_worker_heartbeats(session)
        controllers = repository.list_fleet_controllers(session)
    except SQLAlchemyError:
        session.rollback()
        health = Health(status="unavailable", database="unreachable", queue_depth=None, workers=[])
        # Every 503 carries Retry-After (issue 38): a load balancer or a client backs off.
        return JSONResponse(status_code=503, content=health.model_dump(mode="json"),
                            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)})
    workers = [
        WorkerHealth(
            worker_id=h.worker_id, hostname=h.hostname, last_seen_at=h.last_seen_at,
            alive=h.last_seen_at >= cutoff, current_submission_id=h.current_submission_id,
            gpu=h.gpu, cpus=h.cpus, launcher=h.launcher,
        )
        for h in heartbeats
    ]
    fleets = [FleetHealth.model_validate(c, from_attributes=True) for c in controllers]
    status = "ok" if any(w.alive for w in workers) else "degraded"
    return Health(status=status, database="ok", queue_depth=queue_depth, workers=workers, fleets=fleets)


@router.get("/metrics", response_class=Response)
def read_metrics(request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    """Prometheus text format: queue depth, submissions by status, gradings by verdict,
    grading duration histogram, live workers; and this API process's admission (places
    held, requests queued, refusals by reason: api/admission.py)."""
    registry = build_registry(session, worker_stale_after_s=settings.worker_stale_after,
                              admission=request.app.state.admission)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
