"""submissions/worker.py through a database outage: a grading that finishes while the
database is unreachable (longer than the old 3 tries in 0.6 s) is stored once when it
returns, never graded again, even if the worker is SIGKILLed meanwhile (its spool file is
stored by the next worker).

The outage: on PostgreSQL a `CuttableProxy` between the worker and the server is cut (new
connections refused, open ones aborted); on SQLite another connection holds the write lock
and the worker's busy timeout is 0.1 s, so every write fails with "database is locked".
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from api.main import create_app
from submissions import repository
from submissions.db import create_db_engine, create_session_factory
from submissions.worker import Worker

from ..helpers import create_student, kernel_source, make_settings, upload, wait_until, worker_environment
from ..tcp_proxy import CuttableProxy

OUTAGE_S = 5.0  # longer than the 0.6 s of retries the worker used to allow


@dataclass
class Outage:
    """The database as a worker reaches it (`url`), which the test can cut and restore."""

    url: str
    backend: str
    proxy: CuttableProxy | None = None
    _lock: sqlite3.Connection | None = field(default=None, repr=False)

    def cut(self) -> None:
        if self.proxy is not None:
            self.proxy.cut()
        else:
            self._lock = sqlite3.connect(make_url(self.url).database, isolation_level=None)
            self._lock.execute("BEGIN EXCLUSIVE")

    def restore(self) -> None:
        if self.proxy is not None:
            self.proxy.restore()
        else:
            assert self._lock is not None
            self._lock.execute("ROLLBACK")
            self._lock.close()
            self._lock = None


@pytest.fixture
def outage(committed_db) -> Iterator[Outage]:
    if committed_db.backend == "sqlite":
        yield Outage(committed_db.url, "sqlite")
        return
    proxy = CuttableProxy.for_database(committed_db.url)
    try:
        yield Outage(proxy.url_for(committed_db.url), "postgres", proxy)
    finally:
        proxy.close()


@pytest.fixture
def api(committed_db):
    with TestClient(create_app(committed_db.settings())) as client:
        yield client


def _grading(committed_db, submission_id: int):
    with committed_db.session_factory() as session:
        return repository.get_submission(session, submission_id=submission_id).current_grading


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_a_result_finished_during_an_outage_is_stored_once_when_the_database_returns(
        committed_db, outage, api, tmp_path) -> None:
    runs, release, spool = tmp_path / "runs", tmp_path / "release", tmp_path / "spool"
    settings = make_settings(outage.url, lease_s=30, heartbeat_interval_s=0.25,
                             sqlite_busy_timeout_s=0.1, record_retry_max_s=1.0,
                             worker_spool_dir=str(spool))
    _, token = create_student(api)
    submission_id = upload(api, token, kernel_source(f"runs={runs} wait_for={release}")
                           ).json()["id"]
    engine = create_db_engine(outage.url, sqlite_busy_timeout_s=0.1)
    worker = Worker(settings, create_session_factory(engine), worker_id="w1")
    thread = threading.Thread(target=worker.run_forever)
    thread.start()
    try:
        wait_until(lambda: _lines(runs), timeout=30, message="the grading to start")
        outage.cut()
        cut_at = time.monotonic()
        release.touch()  # the grader finishes now, with the database down
        wait_until(lambda: list(spool.glob("*.json")), timeout=10, message="a spooled result")
        time.sleep(max(0.0, cut_at + OUTAGE_S - time.monotonic()))
        assert list(spool.glob("*.json")), "the result was stored although the database was cut"
        outage.restore()
        wait_until(lambda: _grading(committed_db, submission_id).status == "passed", timeout=15,
                   message="the result to be stored after the outage")
    finally:
        if outage.proxy is None and outage._lock is not None:
            outage.restore()
        worker.request_stop()
        thread.join(timeout=15)
        engine.dispose()
    grading = _grading(committed_db, submission_id)
    assert (grading.attempts, grading.worker_id) == (1, "w1")
    assert [c.name for c in grading.checks] == ["autograd_fp32", "bf16_rows"]
    assert len(_lines(runs)) == 1  # graded once
    assert not list(spool.glob("*.json"))  # the spool file is gone once stored


def _start_worker(url: str, worker_id: str, tmp_path: Path, **settings: str
                  ) -> subprocess.Popen[bytes]:
    env = worker_environment(url, **settings)
    log = (tmp_path / f"{worker_id}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "submissions.cli", "worker", "--worker-id", worker_id],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=log,
    )


@pytest.mark.slow
def test_a_spooled_result_survives_a_sigkilled_worker_and_is_stored_by_the_next(
        committed_db, outage, api, tmp_path) -> None:
    runs, release, spool = tmp_path / "runs", tmp_path / "release", tmp_path / "spool"
    worker_settings = {"lease_s": "3", "heartbeat_interval_s": "0.25",
                       "sqlite_busy_timeout_s": "0.1", "record_retry_max_s": "1",
                       "worker_spool_dir": str(spool)}
    _, token = create_student(api)
    submission_id = upload(api, token, kernel_source(f"runs={runs} wait_for={release}")
                           ).json()["id"]
    doomed = _start_worker(outage.url, "doomed", tmp_path, **worker_settings)
    survivor = None
    try:
        wait_until(lambda: _lines(runs), timeout=60, message="the grading to start")
        outage.cut()
        cut_at = time.monotonic()
        release.touch()
        wait_until(lambda: list(spool.glob("*.json")), timeout=10, message="a spooled result")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=10)
        time.sleep(max(0.0, cut_at + OUTAGE_S - time.monotonic()))  # the 3 s lease expires
        outage.restore()
        grading = _grading(committed_db, submission_id)
        assert (grading.status, grading.worker_id) == ("running", "doomed")

        survivor = _start_worker(outage.url, "survivor", tmp_path, **worker_settings)
        wait_until(lambda: _grading(committed_db, submission_id).status == "passed", timeout=60,
                   message="the spooled result to be stored by the next worker")
        wait_until(lambda: not list(spool.glob("*.json")), timeout=10,
                   message="the spool file to be deleted")
        time.sleep(1.0)  # the survivor keeps polling: it must not claim the job again
    finally:
        if outage.proxy is None and outage._lock is not None:
            outage.restore()
        for process in (doomed, survivor):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=15)
    grading = _grading(committed_db, submission_id)
    assert (grading.status, grading.attempts) == ("passed", 1)
    assert [c.name for c in grading.checks] == ["autograd_fp32", "bf16_rows"]
    assert len(_lines(runs)) == 1, "the finished grading was graded again"
    assert survivor.returncode == 0, (tmp_path / "survivor.log").read_text()[-2000:]
    assert "storing the result spooled by doomed" in (tmp_path / "survivor.log").read_text()


def test_retry_pauses_grow_exponentially_with_jitter_up_to_the_cap() -> None:
    import itertools
    import random

    from submissions.worker import backoff_delays

    delays = list(itertools.islice(backoff_delays(0.2, 10.0, random.Random(7)), 12))
    bounds = [min(10.0, 0.2 * 2**n) for n in range(12)]
    assert all(bound / 2 <= delay <= bound for delay, bound in zip(delays, bounds, strict=True))
    assert len(set(delays)) == len(delays)  # jittered, not in step
    assert sum(delays[:3]) < 1.4 and max(delays) <= 10.0 and delays[-1] >= 5.0
