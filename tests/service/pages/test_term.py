"""api/pages/routes/term.py over HTTP (TestClient), on SQLite and PostgreSQL: a term's
staff work on the pages: roster add and import (tokens downloaded once, every bad row at
once), token rotation, staff accounts, extensions, the final ranking run after a due date
in the past is confirmed, and the course-wide exports; the roster shows each student's
standing. The browser walk is in tests/pages/test_browser.py."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from urllib.parse import unquote

from fastapi.testclient import TestClient

from api.pages.security import csrf_token_for

from ..helpers import (
    INSTRUCTOR_TOKEN,
    Clock,
    bearer,
    create_staff,
    grade_next,
    kernel_source,
    make_outcome,
    upload,
)

NAME = "softmax_backward"
DUE = dt.datetime(2026, 12, 15, 23, 59, tzinfo=dt.UTC)


def _signed_in(client: TestClient, token: str) -> str:
    page = client.get("/sign-in").text
    nonce = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    response = client.post("/sign-in", data={"csrf_token": nonce, "token": token, "next": "/"},
                           follow_redirects=False)
    assert response.status_code == 303, response.text
    return csrf_token_for(token)


def _token_on(html: str) -> str:
    return re.search(r'id="new-token" class="code" readonly size="70" value="([^"]+)"',
                     html).group(1)


def test_a_term_on_the_staff_pages(client, db_session) -> None:
    clock = Clock(client, DUE - dt.timedelta(days=3))
    csrf = _signed_in(client, INSTRUCTOR_TOKEN)

    # Settings: a due date, then students.
    saved = client.post(f"/staff/assignments/{NAME}", data={
        "csrf_token": csrf, "due_at": "2026-12-15T23:59", "late_policy": "mark_late",
        "correctness_points": "100", "speed_points": "", "max_submissions": "",
        "rate_limit_submissions": "", "rate_limit_window_s": "", "opens_at": "",
        "leaderboard_visible": "on"}, follow_redirects=False)
    assert saved.status_code == 303, saved.text

    added = client.post("/staff/students", data={"csrf_token": csrf, "name": "Ada",
                                                 "email": "ada@example.edu", "external_id": "s1"})
    assert added.status_code == 200 and added.headers["cache-control"] == "no-store"
    ada = _token_on(added.text)
    assert client.get("/api/v1/me", headers=bearer(ada)).json()["role"] == "student"

    bad = ("name,email,id\nBob,bob@example.edu,s2\n,x@example.edu,s3\n"
           "Cy,cy-at-example,s4\nAda,ada@example.edu,s9\n")
    refused = client.post("/staff/students/import", data={"csrf_token": csrf, "roster": bad})
    assert refused.status_code == 422
    assert all(f"line {n}:" in refused.text for n in (3, 4, 5))  # all at once
    assert "Bob" in refused.text  # the pasted roster is kept for fixing
    good = "name,email,id\nBob,bob@example.edu,s2\nCy,cy@example.edu,s4\nAda,ada@example.edu,s1\n"
    imported = client.post("/staff/students/import", data={"csrf_token": csrf, "roster": good})
    assert imported.status_code == 200, imported.text
    assert imported.headers["cache-control"] == "no-store"
    # The page says what it did, shows the new table, empties the box, and holds the new
    # students' tokens once (a tokens.csv download and the text), none for Ada (enrolled).
    assert "Imported 3 row(s):</strong> 2 new student(s) created, 1 already enrolled" \
        in imported.text
    assert "Tokens are shown once." in imported.text
    assert re.search(r'<textarea id="roster-csv" name="roster" rows="8" required></textarea>',
                     imported.text)
    assert imported.text.count('<a href="/staff/students/') >= 3  # Ada, Bob and Cy listed
    link = re.search(r'href="data:text/csv;charset=utf-8,([^"]+)" download="tokens.csv"',
                     imported.text).group(1)
    tokens = {r["name"]: r["token"] for r in csv.DictReader(io.StringIO(unquote(link)))}
    assert set(tokens) == {"Bob", "Cy"} and all(tokens.values())
    again = client.post("/staff/students/import", data={"csrf_token": csrf, "roster": good})
    assert "3 already enrolled" in again.text and 'id="no-new-tokens"' in again.text
    assert "tokens.csv" not in again.text.split('id="import-done"')[1].split("</div>")[0] \
        .replace("<code>tokens.csv</code>", "")
    bob_id = client.get("/api/v1/me", headers=bearer(tokens["Bob"])).json()["id"]

    # A staff account and a rotation from the pages.
    ta_page = client.post("/staff/staff", data={"csrf_token": csrf, "name": "Grace", "role": "ta"})
    ta = _token_on(ta_page.text)
    assert client.get("/api/v1/me", headers=bearer(ta)).json()["role"] == "ta"
    grace_id = next(m["id"] for m in client.get("/api/v1/staff", headers=bearer(INSTRUCTOR_TOKEN)).json()
                    if m["name"] == "Grace")
    asked = client.post(f"/staff/staff/{grace_id}/token", data={"csrf_token": csrf})
    assert "Staff accounts affected (no student)" in asked.text
    assert client.get("/api/v1/me", headers=bearer(ta)).status_code == 200  # asked only
    asked = client.post(f"/staff/students/{bob_id}/token", data={"csrf_token": csrf})
    assert asked.status_code == 200 and "Rotate Bob&#39;s token?" in asked.text
    assert client.get("/api/v1/me", headers=bearer(tokens["Bob"])).status_code == 200  # asked only
    rotated = client.post(f"/staff/students/{bob_id}/token",
                          data={"csrf_token": csrf, "confirm": "yes"})
    bob = _token_on(rotated.text)
    assert client.get("/api/v1/me", headers=bearer(tokens["Bob"])).status_code == 401
    assert client.get("/staff/staff").text.count("Grace") >= 1

    # Uploads: Ada on time, Bob after the due date (his extension comes below).
    upload(client, ada, kernel_source())
    grade_next(db_session, make_outcome(speedup=None))
    clock.set(DUE + dt.timedelta(hours=5))
    bob_submission = upload(client, bob, kernel_source()).json()["id"]
    grade_next(db_session, make_outcome(speedup=None))
    roster = client.get(f"/staff/students?assignment={NAME}").text
    assert "0 of 100 (100 before the late policy)" in roster and "late: every passing" in roster

    granted = client.post(f"/staff/extensions/{NAME}", data={
        "csrf_token": csrf, "student_id": str(bob_id), "due_at": "", "extra_days": "1",
        "reason": "accommodation"}, follow_redirects=False)
    assert granted.status_code == 303, granted.text
    extensions = client.get(f"/staff/extensions?assignment={NAME}").text
    assert "accommodation" in extensions and "2026-12-16 23:59" in extensions
    assert client.get(f"/api/v1/submissions/{bob_submission}",
                      headers=bearer(bob)).json()["score"]["text"] == "100 of 100"
    roster = client.get(f"/staff/students?assignment={NAME}").text
    assert "(extension: accommodation)" in roster and "late: every passing" not in roster

    # The final run: after the last due date in force; Bob's extension runs to Dec 16.
    early = client.post(f"/staff/assignments/{NAME}/final-run", data={"csrf_token": csrf})
    assert early.status_code == 409 and "before_due_date" in early.text
    clock.set(DUE + dt.timedelta(days=2))
    asked = client.post(f"/staff/assignments/{NAME}/final-run", data={"csrf_token": csrf},
                        follow_redirects=False)
    assert asked.status_code == 200 and 'id="confirm-count">2<' in asked.text  # Ada and Bob
    assert "No final run yet" in client.get(f"/staff/assignments/{NAME}").text
    started = client.post(f"/staff/assignments/{NAME}/final-run",
                          data={"csrf_token": csrf, "confirm": "yes"}, follow_redirects=False)
    assert started.status_code == 303
    running = client.get(f"/staff/assignments/{NAME}").text
    assert "graded <strong>0 of 2</strong>" in running and "Start a new final" not in running
    board = client.get(f"/leaderboard?assignment={NAME}").text
    assert "(provisional)" in board and "grading: 0 of 2 done" in board
    grade_next(db_session, make_outcome(speedup=None))
    assert "graded <strong>1 of 2</strong>" in client.get(f"/staff/assignments/{NAME}").text
    assert "(provisional)" in client.get(f"/leaderboard?assignment={NAME}").text
    grade_next(db_session, make_outcome(speedup=None))
    assert "finished, graded 2 of 2" in client.get(f"/staff/assignments/{NAME}").text
    board = client.get(f"/leaderboard?assignment={NAME}").text
    assert "(final)" in board and "final-run-running" not in board

    # A due date in the past asks for confirmation first.
    form = {"csrf_token": csrf, "due_at": "2026-12-10T12:00", "late_policy": "mark_late",
            "correctness_points": "100", "speed_points": "", "max_submissions": "",
            "rate_limit_submissions": "", "rate_limit_window_s": "", "opens_at": "",
            "leaderboard_visible": "on"}
    asked = client.post(f"/staff/assignments/{NAME}", data=form)
    assert asked.status_code == 409 and 'name="confirm_past_due"' in asked.text
    confirmed = client.post(f"/staff/assignments/{NAME}", data={**form, "confirm_past_due": "on"},
                            follow_redirects=False)
    assert confirmed.status_code == 303

    # The exports carry the same grades: Ada's upload (Dec 12) is now late, Bob's extension
    # (one day past Dec 10) still leaves his Dec 16 upload late.
    canvas = list(csv.DictReader(io.StringIO(
        client.post("/staff/exports/canvas", data={"csrf_token": csrf}).text)))
    assert canvas[0]["Student"] == "Points Possible"
    # Cy never submitted: blank, unless the form asks for zeros.
    assert {r["Student"]: r[NAME] for r in canvas[1:]} == {"Ada": "0", "Bob": "0", "Cy": ""}
    zeros = list(csv.DictReader(io.StringIO(client.post(
        "/staff/exports/canvas", data={"csrf_token": csrf, "zeros": "on"}).text)))
    assert {r["Student"]: r[NAME] for r in zeros[1:]} == {"Ada": "0", "Bob": "0", "Cy": "0"}
    moodle = client.post("/staff/exports/moodle", data={"csrf_token": csrf}).text
    assert "0 of 100 (100 before the late policy)" in moodle
    everyone = json.loads(client.post("/staff/exports/gradescope-class",
                                      data={"csrf_token": csrf, "assignment": NAME}).text)
    assert [(s["name"], s["results"] and s["results"]["score"]) for s in everyone["students"]] \
        == [("Ada", 0.0), ("Bob", 0.0), ("Cy", None)]

    # A TA reads these pages and changes nothing.
    ta_client = TestClient(client.app)
    ta_csrf = _signed_in(ta_client, ta)
    assert ta_client.get("/staff/extensions").status_code == 200
    assert ta_client.post("/staff/students", data={"csrf_token": ta_csrf,
                                                   "name": "Eve"}).status_code == 403
    _, other_ta = create_staff(client, "Hal", "ta")
    assert "Hal" in ta_client.get("/staff/staff").text
