"""`grader fleet slurm` against a real one-node SLURM cluster and a real `grader serve` (no
embedded worker) on PostgreSQL: every grading is done by `grader worker` processes that the
controller submitted as SLURM jobs.

The workers run the service tests' stand-in grader (tests/service/fakes/fake_grader.py): the
fleet's job is scheduling, and the stand-in makes each grading take a known time and count its
runs; the sandboxed grader itself is tested elsewhere (tests/grader, test_end_to_end.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from submissions.fleet.slurm import jobs_to_submit

from ..helpers import FAKE_GRADER, INSTRUCTOR_TOKEN, kernel_source, wait_until
from ..slurm_cluster import SlurmCluster, free_port, missing_programs

REPOSITORY_ROOT = Path(__file__).resolve().parents[3]
MAX_JOBS = 2
IDLE_EXIT_S = 4.0
UPLOADS = 20


def test_jobs_to_submit_fills_up_to_the_maximum_and_counts_idle_workers() -> None:
    # 20 waiting, nothing running: as many as allowed.
    assert jobs_to_submit(queue_depth=20, pending=0, running=0, busy=0, max_jobs=2) == 2
    # Work for the jobs already there: nothing more.
    assert jobs_to_submit(queue_depth=2, pending=1, running=1, busy=0, max_jobs=8) == 0
    # Three waiting, one worker busy with a fourth: three more jobs.
    assert jobs_to_submit(queue_depth=3, pending=0, running=1, busy=1, max_jobs=8) == 3
    # Never past the maximum, never negative.
    assert jobs_to_submit(queue_depth=50, pending=3, running=5, busy=5, max_jobs=8) == 0
    assert jobs_to_submit(queue_depth=0, pending=2, running=0, busy=0, max_jobs=8) == 0


@pytest.fixture
def slurm_cluster(tmp_path: Path):
    missing = missing_programs()
    if missing:
        pytest.fail(f"the SLURM test cluster needs {', '.join(missing)}: run `make test` (its set-up installs "
                    "Debian's munge, slurmctld, slurmd and slurm-client), or apt-get install them")
    if os.geteuid() != 0:
        pytest.fail("the SLURM test cluster runs its daemons as root (as `make test` does on the dev machines)")
    cluster = SlurmCluster(tmp_path / "slurm", cpus=MAX_JOBS)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.mark.slow
@pytest.mark.parametrize("database_server", ["postgres"], indirect=True)
def test_fleet_submits_jobs_up_to_the_maximum_grades_every_upload_and_reruns_a_cancelled_one(
        tmp_path: Path, slurm_cluster: SlurmCluster, committed_db) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GRADER_")}
    env.update(slurm_cluster.environment())
    env.update({
        "PYTHONPATH": str(REPOSITORY_ROOT),
        "GRADER_DATABASE_URL": committed_db.url,
        "GRADER_INSTRUCTOR_TOKEN": INSTRUCTOR_TOKEN,
        "GRADER_DEPLOYMENT_SEED": "fleet-test-seed",
        "GRADER_GRADE_COMMAND": json.dumps([sys.executable, str(FAKE_GRADER)]),
        "GRADER_POLL_INTERVAL_S": "0.2",
        "GRADER_RATE_LIMIT_SUBMISSIONS": "1000",
        "GRADER_WORKER_SPOOL_DIR": str(tmp_path / "spool"),
        "GRADER_LEASE_S": "20",
    })
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    serve_log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen([sys.executable, "-m", "grader", "serve", "--port", str(port), "--workers-embedded", "0"],
                             cwd=tmp_path, env=env, stdout=serve_log, stderr=subprocess.STDOUT)
    fleet_log = tmp_path / "fleet.log"
    fleet = None
    try:
        wait_until(lambda: _healthy(base), timeout=60, interval=0.3, message="grader serve")
        staff = {"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}
        student = httpx.post(f"{base}/api/v1/students", json={"name": "ada"}, headers=staff, timeout=10)
        assert student.status_code == 201, student.text
        token = {"Authorization": f"Bearer {student.json()['token']}"}

        runs = tmp_path / "runs"
        runs.mkdir()
        cancelled_marker = tmp_path / "second-run-finishes"
        ids = []
        for index in range(UPLOADS):
            # The first grading blocks (an hour) until it is cancelled; its re-run finishes at once.
            directive = (f"sleep_once={cancelled_marker} runs={runs / str(index)}" if index == 0
                         else f"sleep=0.5 runs={runs / str(index)}")
            answer = httpx.post(f"{base}/api/v1/submissions", headers=token, timeout=10,
                                files={"file": (f"k{index}.py", kernel_source(directive))},
                                data={"assignment": "softmax_backward"})
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["id"])

        fleet = subprocess.Popen(
            [sys.executable, "-m", "grader", "fleet", "slurm", "--max-jobs", str(MAX_JOBS), "--gres", "",
             "--idle-exit-s", str(IDLE_EXIT_S), "--interval-s", "0.5", "--time", "00:10:00",
             "--state-dir", str(tmp_path / "fleet"), "--name", "grader-test-fleet"],
            cwd=tmp_path, env=env, stdout=fleet_log.open("wb"), stderr=subprocess.STDOUT)

        most_jobs = 0

        def first_is_graded_by_a_job() -> str | None:
            nonlocal most_jobs
            most_jobs = max(most_jobs, len(slurm_cluster.jobs()))
            health = httpx.get(f"{base}/healthz", timeout=5).json()
            for worker in health["workers"]:
                if worker["current_submission_id"] == ids[0] and worker["worker_id"].startswith("slurm-"):
                    return worker["worker_id"]
            return None

        worker_id = wait_until(first_is_graded_by_a_job, timeout=90, interval=0.3,
                               message=f"a SLURM worker grading submission {ids[0]}\n{fleet_log.read_text()[-3000:]}")
        job_id = worker_id.removeprefix("slurm-").split("@")[0]
        slurm_cluster.cancel(job_id)

        def all_graded() -> bool:
            nonlocal most_jobs
            most_jobs = max(most_jobs, len(slurm_cluster.jobs()))
            statuses = [httpx.get(f"{base}/api/v1/submissions/{i}", headers=token, timeout=5).json()["status"]
                        for i in ids]
            return all(status in ("passed", "failed", "error") for status in statuses)

        wait_until(all_graded, timeout=180, interval=0.5,
                   message=f"every upload graded\n{fleet_log.read_text()[-3000:]}\n{slurm_cluster.logs()}")
        assert most_jobs == MAX_JOBS, f"the fleet reached {most_jobs} jobs at most, expected {MAX_JOBS}"
        # The cancelled grading ran twice (the second time to its end), every other once.
        assert len((runs / "0").read_text().split()) == 2
        assert all(len((runs / str(index)).read_text().split()) == 1 for index in range(1, UPLOADS))
        # Idle workers leave: no job is left soon after the queue is empty.
        wait_until(lambda: not slurm_cluster.jobs(), timeout=IDLE_EXIT_S + 30, interval=0.5,
                   message="the worker jobs to exit when idle")

        health = httpx.get(f"{base}/healthz", timeout=5).json()
        (controller,) = [f for f in health["fleets"] if f["name"] == "grader-test-fleet"]
        assert controller["scheduler"] == "slurm" and controller["max_jobs"] == MAX_JOBS
        assert controller["submitted_total"] >= MAX_JOBS and controller["last_error"] is None
        metrics = httpx.get(f"{base}/metrics", timeout=5).text
        assert 'grader_fleet_max_jobs{fleet="grader-test-fleet",scheduler="slurm"} 2.0' in metrics
        # The worker jobs' settings file is readable by their user only.
        assert (tmp_path / "fleet" / "worker.env").stat().st_mode & 0o077 == 0
    finally:
        if fleet is not None:
            fleet.send_signal(signal.SIGTERM)
            try:
                fleet.wait(timeout=15)
            except subprocess.TimeoutExpired:
                fleet.kill()
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
        serve_log.close()
    assert fleet.returncode == 0, fleet_log.read_text()[-3000:]


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        time.sleep(0.1)
        return False
