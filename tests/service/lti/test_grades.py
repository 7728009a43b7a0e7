"""AGS against a real platform (lti1p3platform): the score the board computes (the one
scoring rule) reaches the platform after a grading, follows a due-date move and a regrade,
matches the API and the LMS export; one line item per assignment across retries, restarts
and a lost record of it; a failed push (platform down, or one student refused) is recorded
with its reason, never blocks another student's, and is sent once the platform is back."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re

from fastapi.testclient import TestClient
from sqlalchemy import text

from submissions.lti.platform import forget_tokens

from ..helpers import (
    Clock,
    bearer,
    configure,
    create_staff,
    create_student,
    grade_next,
    instructor_headers,
    kernel_source,
    make_outcome,
    upload,
)
from .conftest import launch
from .platform import Platform

T0 = dt.datetime(2030, 1, 10, 12, 0, tzinfo=dt.UTC)
A = "softmax_backward"


def student_through_lms(client: TestClient, lms: Platform, sub: str, name: str) -> str:
    """A student who came through the LMS, then took a CLI token from their own page."""
    lms.add_person(sub, name)
    assert launch(client, lms, sub).status_code == 303
    page = client.get("/me/token")
    assert page.status_code == 200 and "Show me a new token" in page.text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    shown = client.post("/me/token", data={"csrf_token": csrf})
    assert shown.status_code == 200
    token = re.search(r'id="new-token"[^>]*value="(gst_[^"]+)"', shown.text).group(1)
    assert client.get("/api/v1/me", headers=bearer(token)).json()["name"] == name
    client.cookies.clear()
    return token


def sync(client: TestClient) -> dict:
    response = client.post("/api/v1/lti/sync", headers=instructor_headers())
    assert response.status_code == 200, response.text
    return response.json()


def states(client: TestClient) -> dict[str, dict]:
    status = client.get("/api/v1/lti/status", headers=instructor_headers()).json()
    return {row["student_name"]: row for row in status["scores"]}


def api_grade(client: TestClient, token: str) -> float:
    rows = client.get("/api/v1/submissions", headers=bearer(token)).json()
    return rows["submissions"][0]["score"]["total"]


def export_score(client: TestClient, name: str) -> float:
    body = client.get(f"/api/v1/assignments/{A}/export/lms", headers=instructor_headers()).text
    return float(next(r for r in csv.DictReader(io.StringIO(body)) if r["name"] == name)["score"])


def test_scores_follow_grading_due_date_and_regrade(client: TestClient, lms: Platform,
                                                    db_session) -> None:
    clock = Clock(client, T0)
    ada = student_through_lms(client, lms, "u-ada", "Ada")
    uploaded = upload(client, ada, kernel_source())
    assert uploaded.status_code == 202
    submission_id = uploaded.json()["id"]
    assert sync(client)["sent"] == 0  # no grade yet: nothing to send
    grade_next(db_session, make_outcome("passed"))

    # A token account the LMS never listed nor launched, with a grade: nothing to send to.
    cy_id, cy = create_student(client, "Cy")
    assert upload(client, cy, kernel_source()).status_code == 202
    grade_next(db_session, make_outcome("passed"))

    assert sync(client)["sent"] == 1
    assert lms.score_of(A, "u-ada")["scoreGiven"] == 100 == api_grade(client, ada)
    assert lms.score_of(A, "u-ada")["scoreMaximum"] == 100
    rows = states(client)
    assert rows["Ada"]["state"] == "synced"
    assert rows["Cy"]["state"] == "no_identity" and rows["Cy"]["student_id"] == cy_id
    assert sync(client)["sent"] == 0  # unchanged: not sent again

    # A due date moved before the upload: late, 0 under the late policy.
    configure(client, due_at=T0 - dt.timedelta(days=1), confirm_past_due=True)
    assert sync(client)["sent"] == 1
    assert lms.score_of(A, "u-ada")["scoreGiven"] == 0 == api_grade(client, ada)
    assert export_score(client, "Ada") == 0
    # An extension puts it on time again.
    ada_id = client.get("/api/v1/me", headers=bearer(ada)).json()["id"]
    granted = client.put(f"/api/v1/assignments/{A}/extensions/{ada_id}", headers=instructor_headers(),
                         json={"extra_days": 30, "reason": "illness"})
    assert granted.status_code == 200, granted.text
    assert sync(client)["sent"] == 1
    assert lms.score_of(A, "u-ada")["scoreGiven"] == 100 == export_score(client, "Ada")

    # A disqualification: 0; restored: the points again.
    assert client.post(f"/api/v1/submissions/{submission_id}/disqualify", headers=instructor_headers(),
                       json={"reason": "copied"}).status_code == 200
    assert sync(client)["sent"] == 1
    assert lms.score_of(A, "u-ada")["scoreGiven"] == 0 == api_grade(client, ada)
    assert export_score(client, "Ada") == 0
    assert client.post(f"/api/v1/submissions/{submission_id}/restore", headers=instructor_headers(),
                       json={}).status_code == 200
    assert sync(client)["sent"] == 1
    assert lms.score_of(A, "u-ada")["scoreGiven"] == 100 == export_score(client, "Ada")

    # A regrade applied (it fails now): 0 reaches the platform.
    _, ta = create_staff(client, "grace", "ta")
    batch = client.post("/api/v1/regrades", json={"assignment": A}, headers=bearer(ta))
    assert batch.status_code in (200, 201, 202), batch.text
    for _ in range(2):  # Ada's and Cy's submissions
        grade_next(db_session, make_outcome("failed", grader_version="1.1"))
    applied = client.post(f"/api/v1/regrades/{batch.json()['id']}/apply", headers=bearer(ta))
    assert applied.status_code == 200, applied.text
    assert sync(client)["sent"] == 1
    assert lms.score_of(A, "u-ada")["scoreGiven"] == 0 == api_grade(client, ada)
    assert lms.course.line_item_creations == 1
    item = next(iter(lms.course.line_items.values()))
    assert (item["resourceId"], item["tag"], item["scoreMaximum"]) == (A, "kernel-grader", 100)
    del clock


def test_failed_pushes_are_recorded_retried_and_never_block_others(
        client: TestClient, lms: Platform, db_session, app_factory, settings) -> None:
    clock = Clock(client, T0)
    ada = student_through_lms(client, lms, "u-ada", "Ada")
    bob = student_through_lms(client, lms, "u-bob", "Bob")
    for token in (ada, bob):
        assert upload(client, token, kernel_source()).status_code == 202
        grade_next(db_session, make_outcome("passed"))

    # The platform is down: both pushes fail, each with the reason; nothing was created.
    lms.stop()
    run = sync(client)
    assert run["sent"] == 0 and len(run["failed"]) == 2
    rows = states(client)
    for name in ("Ada", "Bob"):
        assert rows[name]["state"] == "failed" and rows[name]["attempts"] == 1
        assert "could not be reached" in rows[name]["last_error"]
    client.cookies.set("grader_session", "instructor-test-token-0123456789")
    page = client.get("/lti")
    assert "could not be reached" in page.text and "<strong>failed</strong>" in page.text
    client.cookies.clear()

    # Back, but Bob left the course on the platform: his push is refused, Ada's goes through.
    lms.start()
    del lms.course.people["u-bob"]
    assert sync(client)["sent"] == 0  # the retry waits for its backoff (60 s)
    clock.set(T0 + dt.timedelta(seconds=61))
    run = sync(client)
    assert run["sent"] == 1 and len(run["failed"]) == 1
    rows = states(client)
    assert rows["Ada"]["state"] == "synced" and rows["Ada"]["attempts"] == 2
    assert rows["Bob"]["state"] == "failed" and "403" in rows["Bob"]["last_error"]
    assert lms.score_of(A, "u-ada")["scoreGiven"] == 100
    assert lms.course.line_item_creations == 1

    # A restart (a new process: no cached token) and a lost record of the line item: a new
    # grade finds the platform's line item again instead of creating a second one.
    forget_tokens()
    restarted = app_factory(settings)
    Clock(restarted, T0 + dt.timedelta(seconds=62))
    db_session.execute(text("DELETE FROM lti_line_items"))
    db_session.commit()
    configure(restarted, due_at=T0 - dt.timedelta(days=1), confirm_past_due=True)
    assert sync(restarted)["sent"] == 1
    assert lms.score_of(A, "u-ada")["scoreGiven"] == 0
    assert lms.course.line_item_creations == 1
    posts = [p for p in lms.course.score_posts if p["userId"] == "u-ada"]
    assert [p["scoreGiven"] for p in posts] == [100, 0]  # each grade sent once
