"""api/routes/health.py: /healthz (database, worker heartbeats) and /metrics."""

from __future__ import annotations

import datetime as dt

from submissions import repository

from ..helpers import create_student, kernel_source, make_outcome, upload, upload_graded


def test_healthz_reports_database_and_workers(client, db_session) -> None:
    body = client.get("/healthz").json()
    assert body["database"] == "ok" and body["status"] == "degraded" and body["workers"] == []

    now = dt.datetime.now(dt.UTC)
    repository.upsert_worker_heartbeat(
        db_session, worker_id="gpu0", hostname="h", pid=1, started_at=now,
        current_submission_id=None, now=now)
    repository.upsert_worker_heartbeat(
        db_session, worker_id="old", hostname="h", pid=2, started_at=now,
        current_submission_id=None, now=now - dt.timedelta(hours=1))
    db_session.commit()
    body = client.get("/healthz").json()
    assert body["status"] == "ok"
    assert {w["worker_id"]: w["alive"] for w in body["workers"]} == {"gpu0": True, "old": False}


def test_metrics_expose_queue_depth_verdicts_and_durations(client, db_session) -> None:
    _, token = create_student(client)
    upload_graded(client, db_session, token, make_outcome(speedup=1.5))
    upload(client, token, kernel_source())
    response = client.get("/metrics")
    assert response.status_code == 200
    text = response.text
    assert "grader_queue_depth 1.0" in text
    assert 'grader_gradings_total{error_kind="",verdict="passed"} 1.0' in text
    assert 'grader_grading_duration_seconds_bucket{le="5"} 1.0' in text
    assert "grader_grading_duration_seconds_count 1.0" in text
    assert 'grader_submissions{status="queued"} 1.0' in text


def test_metrics_expose_this_processs_admission(app_factory, settings) -> None:
    """The admission's places, queue and refusals (api/admission.py) are series of /metrics,
    which has places of its own and so answers while every request place is taken."""
    from ..helpers import instructor_headers

    with app_factory(settings.model_copy(update={"api_max_queued": 0})) as api:
        gate = api.app.state.admission.api
        api.portal.call(lambda: setattr(gate, "holders", gate.places))  # every place taken
        try:
            assert api.get("/api/v1/me", headers=instructor_headers()).status_code == 503
            text = api.get("/metrics").text
        finally:
            api.portal.call(lambda: setattr(gate, "holders", 0))
    assert f"grader_api_requests_in_flight {float(gate.places)}" in text
    assert "grader_api_requests_queued 0.0" in text
    assert 'grader_api_requests_refused_total{reason="queue_full"} 1.0' in text
    assert 'grader_api_requests_refused_total{reason="waited_too_long"} 0.0' in text
    assert 'grader_api_requests_refused_total{reason="predicted_too_long"} 0.0' in text
    assert "grader_api_requests_admitted_after_wait_total 0.0" in text


def test_unreachable_database_is_503_with_a_stable_code() -> None:
    from fastapi.testclient import TestClient

    from api.main import create_app

    from ..helpers import bearer, make_settings

    app = create_app(make_settings("postgresql+psycopg://postgres@127.0.0.1:1/none"))
    with TestClient(app) as client:
        response = client.get("/healthz")
        assert response.status_code == 503 and response.json()["database"] == "unreachable"
        assert response.headers["retry-after"] == "5"  # every 503 carries it (issue 38)
        response = client.get("/metrics")
        assert response.status_code == 503 and response.headers["retry-after"] == "5"
        response = client.get("/api/v1/submissions", headers=bearer("some-token"))
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "database_unavailable"
        assert response.headers["retry-after"] == "5"


def test_a_sigkilled_worker_is_dead_on_healthz_within_3_heartbeats(committed_db, tmp_path) -> None:
    """A real worker process, heartbeat every 1 s: alive while it runs (no false death over
    several intervals), dead within 3 intervals of its SIGKILL (it cannot remove its row)."""
    import signal
    import subprocess
    import sys
    import time

    from fastapi.testclient import TestClient

    from api.main import create_app

    from ..helpers import wait_until, worker_environment

    interval = 1.0
    settings = committed_db.settings(heartbeat_interval_s=interval)
    assert settings.worker_stale_after == 3 * interval
    env = worker_environment(committed_db.url, heartbeat_interval_s=str(interval))
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "submissions.cli", "worker", "--worker-id", "victim"],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        with TestClient(create_app(settings)) as api:
            def victim() -> dict | None:
                return next((w for w in api.get("/healthz").json()["workers"]
                             if w["worker_id"] == "victim"), None)

            wait_until(lambda: (victim() or {}).get("alive"), timeout=60,
                       message="the worker's first heartbeat")
            watch_until = time.monotonic() + 4 * interval
            while time.monotonic() < watch_until:  # alive all along while it runs
                assert victim()["alive"], "a running worker was reported dead"
                time.sleep(0.1)
            assert api.get("/healthz").json()["status"] == "ok"

            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=10)
            killed_at = time.monotonic()
            wait_until(lambda: victim()["alive"] is False, timeout=30, interval=0.05,
                       message="the killed worker to be reported dead")
            dead_after = time.monotonic() - killed_at
            assert dead_after <= 3 * interval + 0.5, dead_after
            body = api.get("/healthz").json()
            assert body["status"] == "degraded" and victim() is not None
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_healthz_and_metrics_show_where_workers_run_and_the_fleet(client, db_session) -> None:
    now = dt.datetime.now(dt.UTC)
    repository.upsert_worker_heartbeat(
        db_session, worker_id="slurm-41@node7", hostname="node7", pid=1, started_at=now, current_submission_id=None,
        now=now, gpu="NVIDIA H200, index 1, GPU-0c5b", cpus="8-15", launcher="slurm job 41 (partition gpu)")
    repository.upsert_worker_heartbeat(
        db_session, worker_id="cpu", hostname="h", pid=2, started_at=now, current_submission_id=None, now=now)
    repository.record_fleet_tick(db_session, name="h200-fleet", scheduler="slurm", max_jobs=4, pending_jobs=1,
                                 running_jobs=2, queue_depth=3, submitted=2, error=None, now=now)
    repository.record_fleet_tick(db_session, name="h200-fleet", scheduler="slurm", max_jobs=4, pending_jobs=0,
                                 running_jobs=3, queue_depth=1, submitted=1, error="sbatch: timeout", now=now)
    db_session.commit()
    body = client.get("/healthz").json()
    worker = next(w for w in body["workers"] if w["worker_id"] == "slurm-41@node7")
    assert (worker["gpu"], worker["cpus"], worker["launcher"]) == (
        "NVIDIA H200, index 1, GPU-0c5b", "8-15", "slurm job 41 (partition gpu)")
    (fleet,) = body["fleets"]
    assert (fleet["running_jobs"], fleet["pending_jobs"], fleet["submitted_total"], fleet["last_error"]) == (
        3, 0, 3, "sbatch: timeout")
    text = client.get("/metrics").text
    assert 'grader_workers_alive_by_gpu{gpu="NVIDIA H200"} 1.0' in text
    assert 'grader_workers_alive_by_gpu{gpu="none"} 1.0' in text
    assert 'grader_fleet_jobs{fleet="h200-fleet",scheduler="slurm",state="running"} 3.0' in text
