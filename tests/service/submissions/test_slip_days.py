"""submissions/slip_days.py against a committed database: two uploads by one student, both
one day late, racing in two transactions (real threads; PostgreSQL's row lock, SQLite's write
lock) spend one slip day, once; and a worker's stored verdict re-derives the spend when the
best submission counts."""

from __future__ import annotations

import csv
import datetime as dt
import io
import threading

from fastapi.testclient import TestClient
from sqlalchemy import select

from api.main import create_app
from submissions import repository, service, slip_days
from submissions.audit import Actor
from submissions.models import SlipDaySpend
from submissions.worker import Worker

from ..helpers import (
    Clock,
    configure,
    create_student,
    grade_next,
    instructor_headers,
    kernel_source,
    make_outcome,
    upload,
)

DUE = dt.datetime(2026, 12, 15, 23, 59, tzinfo=dt.UTC)
STAFF = Actor(kind="bootstrap", name="test")


def _course(committed_db, *, counting: str, budget: int = 2) -> int:
    with TestClient(create_app(committed_db.settings())) as api:
        configure(api, due_at=DUE, confirm_past_due=True, counting=counting)
        student_id, _token = create_student(api, "ada")
    with committed_db.session_factory.begin() as session:
        slip_days.set_budget(session, student_id=student_id, days=budget, reason="term",
                             actor=STAFF, now=DUE)
    return student_id


def test_two_concurrent_late_uploads_spend_one_slip_day_once(committed_db) -> None:
    student_id = _course(committed_db, counting="latest")
    settings = committed_db.settings()
    now = DUE + dt.timedelta(hours=23)  # one day late: one slip day covers it
    barrier = threading.Barrier(2, timeout=30)
    created: list[int] = []
    failures: list[BaseException] = []

    def upload_late() -> None:
        try:
            with committed_db.session_factory.begin() as session:
                # Both start at once: on PostgreSQL both transactions read the student and
                # the (empty) spends before either locks the row; SQLite's BEGIN IMMEDIATE
                # makes the second wait for the first's write lock.
                barrier.wait()
                student = repository.get_student(session, student_id=student_id)
                queued = service.create_submission(
                    session, student=student, assignment_name="softmax_backward",
                    upload=kernel_source().encode(), client_filename="k.py", settings=settings,
                    now=now)
                created.append(queued.submission.id)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=upload_late) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures, failures
    assert len(created) == 2
    with committed_db.session_factory() as session:
        spends = session.scalars(select(SlipDaySpend)).all()
        # One row, one day, on the submission that counts (the latest upload).
        assert [(s.student_id, s.assignment, s.days, s.submission_id) for s in spends] == [
            (student_id, "softmax_backward", 1, max(created))]
        held = slip_days.account(session, student_id=student_id)
        assert (held.budget, held.used, held.left) == (2, 1, 1)
    # Deriving the same state again writes the same row (idempotent).
    with committed_db.session_factory.begin() as session:
        again = slip_days.rederive(session, student_id=student_id, now=now)
        assert again.spent == {"softmax_backward": (max(created), 1)}
    with committed_db.session_factory() as session:
        [spend] = session.scalars(select(SlipDaySpend)).all()
        assert spend.id == spends[0].id and spend.spent_at == spends[0].spent_at
        for _ in created:
            grade_next(session, make_outcome())
    # The same grade on the submission, the board and the LMS export.
    with TestClient(create_app(settings)) as api:
        Clock(api, now)
        counted = "100 of 100 (23 h late, covered by 1 slip day)"
        read = api.get(f"/api/v1/submissions/{max(created)}", headers=instructor_headers())
        assert read.json()["score"]["text"] == counted
        [row] = api.get("/api/v1/leaderboard", headers=instructor_headers()).json()["rows"]
        assert (row["graded_submission_id"], row["score"]["text"]) == (max(created), counted)
        lms = api.get("/api/v1/assignments/softmax_backward/export/lms",
                      headers=instructor_headers()).text
        [line] = list(csv.DictReader(io.StringIO(lms)))
        assert (line["grade"], line["slip_days"], line["late_by"]) == (counted, "1", "23 h")


def test_the_worker_spends_slip_days_once_the_best_submission_is_graded(committed_db) -> None:
    student_id = _course(committed_db, counting="best", budget=1)
    with TestClient(create_app(committed_db.settings())) as api:
        from ..helpers import bearer
        Clock(api, DUE + dt.timedelta(hours=5))
        token = api.post(f"/api/v1/students/{student_id}/token",
                         headers={"Authorization": "Bearer instructor-test-token-0123456789"}
                         ).json()["token"]
        created = upload(api, token, kernel_source()).json()
        # Pending: which submission is best is not known yet, so nothing is spent.
        assert (created["slip_days_spent"], created["slip_days_left"]) == (0, 1)
        worker = Worker(committed_db.settings(), committed_db.session_factory, worker_id="w1")
        assert worker.process_next_job() is True
        body = api.get(f"/api/v1/submissions/{created['id']}", headers=bearer(token)).json()
        assert body["status"] == "passed" and body["late"] is False
        assert body["score"]["text"] == "100 of 100 (5 h late, covered by 1 slip day)"
    with committed_db.session_factory() as session:
        assert slip_days.account(session, student_id=student_id).spent == {
            "softmax_backward": (created["id"], 1)}
