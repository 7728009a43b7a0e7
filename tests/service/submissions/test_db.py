"""submissions/db.py: SQLite runs in WAL mode with a busy timeout and immediate transactions,
so concurrent API writes, claims and lease renewals never fail with "database is locked"."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import threading

from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from submissions import repository, service
from submissions.models import utc_now

from ..helpers import kernel_source


def test_sqlite_pragmas(committed_db) -> None:
    if committed_db.backend != "sqlite":
        return
    with committed_db.engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 30000
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1


def test_uploads_claims_and_renewals_run_concurrently_without_lock_errors(committed_db) -> None:
    settings = committed_db.settings(rate_limit_submissions=10_000)
    factory = committed_db.session_factory
    with factory.begin() as session:
        students = [service.create_student(session, name=f"s{i}", now=utc_now()).student.id
                    for i in range(3)]
    errors: list[BaseException] = []
    stop = threading.Event()
    claimed: list[repository.ClaimedJob] = []

    def uploader(student_id: int) -> None:
        for _ in range(25):
            try:
                with factory.begin() as session:
                    student = repository.get_student(session, student_id=student_id)
                    service.create_submission(
                        session, student=student, assignment_name="softmax_backward",
                        upload=kernel_source().encode(), client_filename="k.py",
                        settings=settings, now=utc_now())
            except OperationalError as exc:
                errors.append(exc)

    def claimer() -> None:
        while not stop.is_set():
            try:
                with factory.begin() as session:
                    job = repository.claim_next_submission(
                        session, worker_id="w", lease_s=30, now=utc_now())
                if job:
                    claimed.append(job)
                    with factory.begin() as session:
                        repository.renew_lease(session, submission_id=job.submission_id,
                                               lease_token=job.lease_token, lease_s=30,
                                               now=utc_now())
                        repository.requeue_expired_leases(
                            session, now=utc_now() - dt.timedelta(hours=1), max_attempts=3)
            except OperationalError as exc:
                errors.append(exc)

    uploaders = [threading.Thread(target=uploader, args=(s,)) for s in students]
    claimers = [threading.Thread(target=claimer) for _ in range(2)]
    for thread in uploaders + claimers:
        thread.start()
    for thread in uploaders:
        thread.join(timeout=60)
    stop.set()
    for thread in claimers:
        thread.join(timeout=60)
    assert errors == []
    assert len({job.submission_id for job in claimed}) == len(claimed)


def test_service_layers_never_import_torch_or_the_grader() -> None:
    # Only the grader's torch-free modules may be imported by the service: the manifest, the
    # one source validator, the result document (grader/report/: the document, its benchmark
    # object, the speed figures read from it) and the stages.
    code = (
        "import sys, api.main, api.cli, submissions.cli, submissions.worker, submissions.grading\n"
        "allowed = {'grader', 'grader.manifest', 'grader.source_validation', 'grader.report',\n"
        "           'grader.report.document', 'grader.report.benchmark_result', 'grader.report.speed',\n"
        "           'grader.stages'}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'triton'}\n"
        "             or (m.split('.')[0] == 'grader' and m not in allowed))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
