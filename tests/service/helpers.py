"""Helpers shared by the service tests (imported relatively: ``from ..helpers import ...``)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from submissions.settings import Settings

FAKES = Path(__file__).parent / "fakes"
FAKE_GRADER = FAKES / "fake_grader.py"
INSTRUCTOR_TOKEN = "instructor-test-token-0123456789"
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
#: Workers started by tests spool finished results here, never in the checkout's var/.
TEST_SPOOL_DIR = Path(tempfile.gettempdir()) / f"grader-test-spool-{os.getpid()}"


def postgres_admin_url() -> str:
    return os.environ.get("GRADER_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


def make_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings for tests: explicit values only (no .env), fake grader, fast queue timings."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "environment": "development",
        "instructor_token": INSTRUCTOR_TOKEN,
        "deployment_seed": "test-deployment-seed",
        "grade_command": [sys.executable, str(FAKE_GRADER)],
        "lease_s": 30.0,
        "poll_interval_s": 0.05,
        "grader_timeout_s": 60.0,
        "worker_spool_dir": str(TEST_SPOOL_DIR),
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)


@dataclass
class CommittedDatabase:
    """A fresh migrated database whose data is really committed (for workers, threads and
    processes)."""

    url: str
    backend: str
    engine: Engine
    session_factory: sessionmaker[Session]

    def settings(self, **overrides: Any) -> Settings:
        return make_settings(self.url, **overrides)


# -------------------------------------------------------------------------- helpers


def kernel_source(directive: str = "", *, function: str = "softmax_backward") -> str:
    """A small valid submission; `directive` steers the fake grader (see fakes/)."""
    return (
        f"# fake-grader: {directive}\n"
        "import math\n\n\n"
        f"def {function}(y, g):\n"
        "    return y * (g - (y * g).sum(-1, keepdim=True))\n"
    )


def instructor_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def create_student(client: TestClient, name: str = "ada") -> tuple[int, str]:
    response = client.post("/api/v1/students", json={"name": name}, headers=instructor_headers())
    assert response.status_code == 201, response.text
    body = response.json()
    return body["id"], body["token"]


def upload(client: TestClient, token: str, source: str | bytes,
           filename: str = "kernel.py", **data: str) -> Any:
    content = source.encode() if isinstance(source, str) else source
    return client.post(
        "/api/v1/submissions",
        files={"file": (filename, content, "text/x-python")},
        data=data or None,
        headers=bearer(token),
    )


def upload_graded(client: TestClient, session: Session, token: str, outcome: Any) -> int:
    """Upload a kernel as the student of ``token`` and store ``outcome`` as its grading (the
    oldest queued submission must be this one); returns the submission's id."""
    response = upload(client, token, kernel_source())
    assert response.status_code == 202, response.text
    graded = grade_next(session, outcome)
    assert graded == response.json()["id"], "another submission was queued before this one"
    return graded


def make_outcome(status: str = "passed", *, speedup: float | None = None,
                 error_kind: str | None = None, seed: int = 1234,
                 grader_version: str = "test") -> Any:
    """A GradingOutcome as the worker would build it from a grader result document (which
    records its `seed`, as the real grader's does)."""
    from submissions.grading import CheckResult, GradingOutcome
    from submissions.models import SubmissionStatus

    passed = status == "passed"
    benchmark = ({"headline": {"name": "geomean_speedup_vs_baseline_graph", "value": speedup}}
                 if speedup is not None else None)
    checks = [CheckResult(name="autograd_fp32", passed=status != "failed", skipped=False,
                          message="ok", numbers={"max_abs_err": 1e-7, "tolerance": "1e-05 (test)"})]
    return GradingOutcome(
        status=SubmissionStatus(status),
        error_kind=error_kind,
        error_message="boom" if error_kind else None,
        checks=[] if status == "error" else checks,
        result_document={"verdict": status, "benchmark": benchmark, "seed": seed,
                         "versions": {"grader": grader_version}},
        benchmark=benchmark,
        headline_speedup=speedup if passed else None,
        versions={"grader": grader_version},
        device="NVIDIA H200" if speedup is not None else "cpu (Triton interpreter)",
        exit_code={"passed": 0, "failed": 1, "error": 2}[status],
        duration_s=1.5,
        log_text="",
        log_truncated=False,
        grader_stderr="",
    )


def grade_next(session: Session, outcome: Any, *, worker_id: str = "test-worker") -> int:
    """Claim the oldest queued submission and store `outcome` for it; returns its id."""
    import datetime as dt

    from submissions import repository

    now = dt.datetime.now(dt.UTC)
    job = repository.claim_next_submission(session, worker_id=worker_id, lease_s=30, now=now)
    assert job is not None
    assert repository.record_grading_outcome(
        session, submission_id=job.submission_id, lease_token=job.lease_token,
        outcome=outcome, now=now)
    session.commit()
    return job.submission_id


def wait_until(predicate: Any, *, timeout: float = 30.0, interval: float = 0.05,
               message: str = "condition") -> Any:
    """Poll `predicate` until it returns a truthy value; fail the test after `timeout` s."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


def worker_environment(database_url: str, **settings: str) -> dict[str, str]:
    """Environment for a `python -m submissions.cli worker` child process in tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
    repository_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [repository_root, env.get("PYTHONPATH")]))
    env.update({
        "GRADER_DATABASE_URL": database_url,
        "GRADER_INSTRUCTOR_TOKEN": INSTRUCTOR_TOKEN,
        "GRADER_DEPLOYMENT_SEED": "test-deployment-seed",
        "GRADER_GRADE_COMMAND": json.dumps([sys.executable, str(FAKE_GRADER)]),
        "GRADER_POLL_INTERVAL_S": "0.1",
        "GRADER_WORKER_SPOOL_DIR": str(TEST_SPOOL_DIR),
    })
    env.update({f"GRADER_{k.upper()}": v for k, v in settings.items()})
    return env


# --------------------------------------------------------------------- course helpers


def create_staff(client: TestClient, name: str = "grace", role: str = "ta") -> tuple[int, str]:
    """A staff account created by the bootstrap instructor; returns (id, token)."""
    response = client.post("/api/v1/staff", json={"name": name, "role": role},
                           headers=instructor_headers())
    assert response.status_code == 201, response.text
    return response.json()["id"], response.json()["token"]


def configure(client: TestClient, assignment: str = "softmax_backward", *,
              confirm_past_due: bool = False, **fields: Any) -> dict:
    """PATCH an assignment's settings as the bootstrap instructor (datetimes as ISO text)."""
    body = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in fields.items()}
    response = client.patch(f"/api/v1/assignments/{assignment}", json=body,
                            params={"confirm_past_due": "true"} if confirm_past_due else None,
                            headers=instructor_headers())
    assert response.status_code == 200, response.text
    return response.json()


class Clock:
    """The API's notion of now (api.deps.get_now), set by the test."""

    def __init__(self, client: TestClient, now: Any) -> None:
        from api.deps import get_now

        self.now = now
        client.app.dependency_overrides[get_now] = lambda: self.now

    def set(self, now: Any) -> None:
        self.now = now
