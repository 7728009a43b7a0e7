"""submissions/worker.py: the worker loop against a real database, with the fake grader.

Includes the crash test: a worker process is SIGKILLed in the middle of a grading; the job
is re-queued when its lease expires and finished by another worker, never by two at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from api.main import create_app
from submissions import repository
from submissions.models import INFRASTRUCTURE_ERROR, Grading
from submissions.worker import Worker

from ..helpers import (
    bearer,
    create_student,
    kernel_source,
    upload,
    wait_until,
    worker_environment,
)


@pytest.fixture
def api(committed_db):
    """An API client on the committed database (what workers see)."""
    with TestClient(create_app(committed_db.settings())) as client:
        yield client


def _status(committed_db, submission_id: int) -> Grading:
    """The submission's current grading (its status, lease, worker, attempts)."""
    with committed_db.session_factory() as session:
        return repository.get_submission(session, submission_id=submission_id).current_grading


def test_worker_grades_and_stores_verdicts_in_one_go(committed_db, api) -> None:
    _, token = create_student(api)
    submission_id = upload(api, token, kernel_source("speedup=1.5")).json()["id"]
    worker = Worker(committed_db.settings(), committed_db.session_factory, worker_id="w1")
    assert worker.process_next_job() is True
    assert worker.process_next_job() is False

    body = api.get(f"/api/v1/submissions/{submission_id}", headers=bearer(token)).json()
    assert body["status"] == "passed" and body["worker_id"] == "w1" and body["attempts"] == 1
    assert [c["name"] for c in body["checks"]] == ["autograd_fp32", "bf16_rows"]
    assert body["checks"][0]["numbers"]["max_abs_err"] == 1e-7
    assert body["benchmark"]["headline"]["value"] == 1.5 and body["headline_speedup"] == 1.5
    assert body["started_at"] and body["finished_at"] and body["grading_duration_s"] > 0
    assert body["versions"]["grader"] == "fake" and body["error"] is None


def test_infrastructure_failures_are_retried_then_shown_and_not_charged(committed_db) -> None:
    settings = committed_db.settings(max_attempts=2, rate_limit_submissions=1)
    with TestClient(create_app(settings)) as api:
        _, token = create_student(api)
        submission_id = upload(api, token, kernel_source("exit=3")).json()["id"]
        assert upload(api, token, kernel_source()).status_code == 429
        worker = Worker(settings, committed_db.session_factory, worker_id="w1")
        assert worker.process_next_job()
        assert _status(committed_db, submission_id).status == "queued"  # retried
        assert worker.process_next_job()
        body = api.get(f"/api/v1/submissions/{submission_id}", headers=bearer(token)).json()
        assert body["status"] == "error" and body["attempts"] == 2
        assert body["error"]["kind"] == INFRASTRUCTURE_ERROR
        assert "infrastructure error" in body["error"]["message"]
        assert body["checks"] == []
        # Our fault: the student may upload again at once.
        assert upload(api, token, kernel_source()).status_code == 202


def test_shutdown_hands_the_job_back_without_charging_an_attempt(committed_db, api) -> None:
    _, token = create_student(api)
    submission_id = upload(api, token, kernel_source("sleep=30")).json()["id"]
    worker = Worker(committed_db.settings(), committed_db.session_factory, worker_id="w1")
    thread = threading.Thread(target=worker.run_forever)
    thread.start()
    wait_until(lambda: _status(committed_db, submission_id).status == "running", timeout=10)
    worker.request_stop()
    thread.join(timeout=10)
    assert not thread.is_alive()
    submission = _status(committed_db, submission_id)
    assert submission.status == "queued" and submission.attempts == 0


def test_a_worker_that_loses_its_lease_stops_grading(committed_db, api) -> None:
    settings = committed_db.settings(lease_s=5, heartbeat_interval_s=0.1)
    _, token = create_student(api)
    submission_id = upload(api, token, kernel_source("sleep=30")).json()["id"]
    worker = Worker(settings, committed_db.session_factory, worker_id="w1")
    thread = threading.Thread(target=worker.run_forever)
    thread.start()
    try:
        wait_until(lambda: _status(committed_db, submission_id).status == "running", timeout=10)
        with committed_db.session_factory.begin() as session:  # as if another worker took it
            session.execute(update(Grading).values(lease_token="someone-else"))
        wait_until(lambda: worker._current is None, timeout=10, message="grading cancelled")
        submission = _status(committed_db, submission_id)
        assert submission.status == "running" and submission.lease_token == "someone-else"
    finally:
        worker.request_stop()
        thread.join(timeout=10)


def test_the_stage_the_grader_reports_is_shown_while_it_runs(committed_db, api) -> None:
    """The grader's stage file (grader/stages.py) reaches the API's progress as it changes,
    with its label and time in that stage; a finished submission shows its verdict, no stage."""
    _, token = create_student(api)
    submission_id = upload(api, token, kernel_source("stages=compiling:1.5,checks:1.5")).json()["id"]
    worker = Worker(committed_db.settings(), committed_db.session_factory, worker_id="w1")
    thread = threading.Thread(target=worker.process_next_job)
    thread.start()
    seen: list[tuple[str, str]] = []

    def progress() -> dict | None:
        body = api.get(f"/api/v1/submissions/{submission_id}", headers=bearer(token)).json()
        stage = (body.get("progress") or {}).get("stage")
        if stage and (not seen or seen[-1][0] != stage):
            seen.append((stage, body["progress"]["stage_label"]))
            assert body["progress"]["stage_elapsed_s"] >= 0
        return body

    try:
        wait_until(lambda: progress()["status"] not in ("queued", "running"), timeout=30, interval=0.1)
    finally:
        thread.join(timeout=30)
    assert seen == [("compiling", "compiling your kernels"), ("checks", "running the correctness checks")]
    final = progress()
    assert final["status"] == "passed" and final["progress"] is None


def _start_worker(committed_db, worker_id: str, log_dir: Path) -> subprocess.Popen[bytes]:
    env = worker_environment(committed_db.url, lease_s="2", heartbeat_interval_s="0.25")
    log = (log_dir / f"{worker_id}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "submissions.cli", "worker", "--worker-id", worker_id],
        cwd=log_dir, env=env, stdout=subprocess.DEVNULL, stderr=log,
    )


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:  # a zombie counts as gone
        return stat.read().split(") ", 1)[1].startswith("Z")


@pytest.mark.slow
def test_sigkilled_worker_job_is_requeued_and_finished_by_another(committed_db, api, tmp_path) -> None:
    marker = tmp_path / "grader-started"
    _, token = create_student(api)
    submission_id = upload(api, token, kernel_source(f"sleep_once={marker}")).json()["id"]

    doomed = _start_worker(committed_db, "doomed", tmp_path)
    survivor = None
    try:
        wait_until(marker.exists, timeout=30, message="the first grading to start")
        survivor = _start_worker(committed_db, "survivor", tmp_path)
        # The heartbeat keeps the 2 s lease alive: the survivor must not take the job.
        wait_until(lambda: any(w["worker_id"] == "survivor" and w["alive"]
                               for w in api.get("/healthz").json()["workers"]), timeout=30)
        threading.Event().wait(2.5)
        submission = _status(committed_db, submission_id)
        assert (submission.status, submission.worker_id, submission.attempts) == (
            "running", "doomed", 1)

        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=10)
        grader_pid = int(marker.read_text())
        wait_until(lambda: _process_gone(grader_pid), timeout=10,
                   message="the orphaned grader to die with its worker")

        wait_until(lambda: _status(committed_db, submission_id).status == "passed", timeout=30,
                   message="the survivor to finish the job")
        body = api.get(f"/api/v1/submissions/{submission_id}", headers=bearer(token)).json()
        assert body["worker_id"] == "survivor" and body["attempts"] == 2
        assert body["checks"][0]["passed"] is True
    finally:
        for process in (doomed, survivor):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=15)
    assert survivor.returncode == 0, (tmp_path / "survivor.log").read_text()[-2000:]


def test_each_job_goes_to_a_grader_started_before_it(committed_db, api, tmp_path) -> None:
    """The worker starts the next job's grader (`--job-on-stdin`) when a grading starts, beside
    it, so that a job claimed right after finds a grader already loaded; each grader takes
    exactly one job."""
    _, token = create_student(api)
    records = [tmp_path / "first.json", tmp_path / "second.json"]
    releases = [tmp_path / "release-first", tmp_path / "release-second"]
    ids = [upload(api, token, kernel_source(f"record={record} wait_for={release}")).json()["id"]
           for record, release in zip(records, releases)]
    worker = Worker(committed_db.settings(), committed_db.session_factory, worker_id="w-warm")
    processed: list[bool] = []
    # One thread runs both jobs, as the worker's loop does (a grader's parent-death signal
    # follows the thread that started it).
    loop = threading.Thread(target=lambda: processed.extend([worker.process_next_job(), worker.process_next_job()]))
    try:
        worker._prepare_warm_grader()
        first = worker._warm.process
        loop.start()
        started = []
        for record, release in zip(records, releases):
            # Each grading waits for its release; meanwhile the next grader is up and waiting.
            wait_until(lambda record=record: record.exists(), timeout=30, message="the grading to start")
            waiting = worker._warm.process if worker._warm is not None else None
            assert waiting is not None and waiting.poll() is None
            assert waiting.pid not in [first.pid, *started]
            started.append(waiting.pid)
            release.write_text("")
        loop.join(timeout=60)
        assert processed == [True, True]
        seen = [json.loads(record.read_text()) for record in records]
        assert [s["pid"] for s in seen] == [first.pid, started[0]]
        assert all("--job-on-stdin" in s["argv"] for s in seen)
    finally:
        for release in releases:
            release.write_text("")
        if loop.ident is not None:
            loop.join(timeout=60)
        if worker._warm is not None:
            worker._warm.close()
    for submission_id in ids:
        assert _status(committed_db, submission_id).status == "passed"


def test_a_grader_that_cannot_be_started_ahead_does_not_stop_the_worker(committed_db, api, monkeypatch) -> None:
    """Starting the next grader ahead is an optimisation: when it fails (here no temporary
    folder can be made, as on a full disk) the worker logs it and goes on, and the job starts
    its grader itself."""
    import submissions.grading as grading

    _, token = create_student(api)
    submission_id = upload(api, token, kernel_source("speedup=1.5")).json()["id"]
    worker = Worker(committed_db.settings(), committed_db.session_factory, worker_id="w-nowarm")
    real_mkdtemp = grading.tempfile.mkdtemp
    calls = []

    def full_disk(*args, **kwargs):
        calls.append(kwargs.get("prefix"))
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real_mkdtemp(*args, **kwargs)

    monkeypatch.setattr(grading.tempfile, "mkdtemp", full_disk)
    worker._prepare_warm_grader()
    assert worker._warm is None and calls == ["grading-"]
    try:
        assert worker.process_next_job() is True
    finally:
        if worker._warm is not None:
            worker._warm.close()
    assert _status(committed_db, submission_id).status == "passed"


def test_no_lease_lost_is_logged_after_the_result_is_stored(committed_db, api, monkeypatch,
                                                            caplog) -> None:
    """Storing a result clears its lease token, so the heartbeat's next renewal fails: that
    is the store's doing, not a lost lease (issue 24: "lease lost" logged after a stored
    result). The worker lingers 0.5 s after the store here, so that renewals surely run."""
    settings = committed_db.settings(heartbeat_interval_s=0.05)
    _, token = create_student(api)
    submission_id = upload(api, token, kernel_source()).json()["id"]
    worker = Worker(settings, committed_db.session_factory, worker_id="w1")
    keep_result = Worker._keep_result

    def keep_result_then_linger(self, result) -> None:  # noqa: ANN001
        keep_result(self, result)
        threading.Event().wait(0.5)

    monkeypatch.setattr(Worker, "_keep_result", keep_result_then_linger)
    thread = threading.Thread(target=worker.run_forever)
    with caplog.at_level("INFO", logger="submissions.worker"):
        thread.start()
        try:
            wait_until(lambda: _status(committed_db, submission_id).status == "passed",
                       timeout=30)
            wait_until(lambda: worker._current is None, timeout=10, message="job finished")
        finally:
            worker.request_stop()
            thread.join(timeout=10)
    assert "lease lost" not in caplog.text, caplog.text
