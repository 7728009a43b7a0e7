"""One grade and one lateness everywhere: moving the due date later and earlier, and
granting and revoking a student's extension, re-derive lateness and the grade at once on
the report page, the API, `grader status` / `grader history`, the leaderboard and every
export (submissions/lateness.py, submissions/scoring.py). Plus the extension endpoints'
rules and the CSV import."""

from __future__ import annotations

import csv
import datetime as dt
import functools
import io
import json
import re

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

import client.cli as student_cli
import client.course as course_cli
from client.http import ServiceClient
from submissions.models import AuditEvent

from ..helpers import (
    INSTRUCTOR_TOKEN,
    Clock,
    bearer,
    configure,
    create_student,
    instructor_headers,
    make_outcome,
    upload_graded,
)

DUE = dt.datetime(2026, 12, 15, 23, 59, tzinfo=dt.UTC)
NAME = "softmax_backward"
BASE = "http://testserver"


@pytest.fixture
def cli(client, monkeypatch, capsys):
    """Run `grader status|history` and `grader course ...` in process against the app:
    the real commands, their HTTP client forwarding to the TestClient."""
    transport = httpx.MockTransport(lambda request: client.send(request))
    factory = functools.partial(ServiceClient, transport=transport)
    monkeypatch.setattr(student_cli, "ServiceClient", factory)
    monkeypatch.setattr(course_cli, "ServiceClient", factory)
    monkeypatch.setenv("COLUMNS", "250")

    def run(main, argv: list[str], token: str) -> str:
        code = main([*argv, "--server", BASE, "--token", token]) if main is not course_cli.main \
            else main(["--server", BASE, "--token", token, *argv])
        out = capsys.readouterr()
        assert code in (0, 1), out.out + out.err
        return re.sub(r"\s+", " ", out.out)

    return run


def _signed_in(client: TestClient, token: str) -> TestClient:
    page = TestClient(client.app)
    form = page.get("/sign-in").text
    nonce = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    assert page.post("/sign-in", data={"csrf_token": nonce, "token": token, "next": "/"},
                     follow_redirects=False).status_code == 303
    return page


def _everywhere(client, cli, page, tmp_path, *, submission_id, token, student_id):
    """(late, grade text) of the submission as each reader shows it."""
    seen: dict[str, tuple[bool, str]] = {}
    api = client.get(f"/api/v1/submissions/{submission_id}", headers=bearer(token)).json()
    seen["api"] = (api["late"], api["score"]["text"])
    listed = client.get("/api/v1/submissions", headers=bearer(token)).json()["submissions"][0]
    seen["api list"] = (listed["late"], listed["score"]["text"])
    gradings = client.get(f"/api/v1/submissions/{submission_id}/gradings",
                          headers=bearer(token)).json()["gradings"]
    seen["api gradings"] = (api["late"], gradings[0]["score"]["text"])

    html = page.get(f"/submissions/{submission_id}").text
    text = re.search(r"score <strong>([^<]+)</strong>", html).group(1)
    seen["page"] = ("<dt>Late</dt>" in html, text)

    status = cli(student_cli.status, [str(submission_id)], token)
    score = re.search(r"score: (.+?) \(correctness", status).group(1)
    seen["grader status"] = ("late: uploaded after your due date" in status, score)
    history = cli(student_cli.history, [], token)
    seen["grader history"] = (" late" in history.split("notes", 1)[1],
                              "0 of 100 (100 before the late policy)"
                              if "0 of 100 (100 before the late policy)" in history
                              else "100 of 100" if "100 of 100" in history else history)

    board = client.get(f"/api/v1/leaderboard?assignment={NAME}",
                       headers=instructor_headers()).json()["rows"]
    row = next(r for r in board if r["student_id"] == student_id)
    seen["leaderboard"] = (row["rank"] is None and row["reason"].startswith("late"),
                           row["score"]["text"])
    course_board = cli(course_cli.main, ["leaderboard", NAME], INSTRUCTOR_TOKEN)
    seen["grader course leaderboard"] = (
        "late: every passing" in course_board,
        "0 of 100 (100 before the late policy)"
        if "0 of 100 (100 before the late policy)" in course_board else
        "100 of 100" if "100 of 100" in course_board else course_board)

    lms_file = tmp_path / "grades.csv"
    cli(course_cli.main, ["export-lms", NAME, "--output", str(lms_file)], INSTRUCTOR_TOKEN)
    [lms] = [r for r in csv.DictReader(io.StringIO(lms_file.read_text()))
             if r["student_id"] == str(student_id)]
    seen["lms export"] = (lms["late_submissions"] == "1",
                          f"{lms['score']} of {lms['max_score']}"
                          + (f" ({lms['late_score']} before the late policy)"
                             if lms["late_score"] else ""))
    canvas_file, moodle_file = tmp_path / "canvas.csv", tmp_path / "moodle.csv"
    cli(course_cli.main, ["export-canvas", "--output", str(canvas_file)], INSTRUCTOR_TOKEN)
    canvas = list(csv.DictReader(io.StringIO(canvas_file.read_text())))
    assert canvas[0]["Student"] == "Points Possible" and canvas[0][NAME] == "100"
    [canvas_row] = [r for r in canvas if r["Student"] == "ada"]
    cli(course_cli.main, ["export-moodle", "--output", str(moodle_file)], INSTRUCTOR_TOKEN)
    [moodle] = [r for r in csv.DictReader(io.StringIO(moodle_file.read_text()))
                if r["Full name"] == "ada"]
    assert moodle[f"{NAME} (Real)"] == canvas_row[NAME]
    feedback = moodle[f"Feedback: {NAME}"]
    seen["canvas and moodle exports"] = (feedback.startswith("0 of") and "late" in feedback,
                                         feedback.split(";")[0])
    class_file = tmp_path / "class.json"
    cli(course_cli.main, ["gradescope-class", NAME, "--output", str(class_file)],
        INSTRUCTOR_TOKEN)
    [entry] = [e for e in json.loads(class_file.read_text())["students"]
               if e["student_id"] == student_id]
    results = entry["results"]
    seen["gradescope class export"] = (
        results["extra_data"]["late"],
        f"{results['score']:g} of 100" + (
            f" ({results['extra_data']['score_before_late_policy']:g} before the late policy)"
            if results["extra_data"]["late"] else ""))
    assert float(canvas_row[NAME]) == results["score"]
    gradescope = client.get(f"/api/v1/submissions/{submission_id}/gradescope",
                            headers=instructor_headers()).json()
    seen["gradescope"] = (gradescope["extra_data"]["late"],
                          f"{gradescope['score']:g} of 100"
                          + (f" ({gradescope['extra_data']['score_before_late_policy']:g} "
                             "before the late policy)" if gradescope["extra_data"]["late"]
                             else ""))
    return seen


def test_dates_and_extensions_move_lateness_and_the_grade_everywhere(
        client, db_session, cli, tmp_path) -> None:
    configure(client, due_at=DUE, correctness_points=60,
              speed_points=[{"min_speedup": 1.0, "points": 40}])
    clock = Clock(client, DUE + dt.timedelta(hours=1))
    ada_id, ada = create_student(client, "ada")
    submission_id = upload_graded(client, db_session, ada, make_outcome(speedup=1.2))
    page = _signed_in(client, ada)
    clock.set(DUE + dt.timedelta(days=5))  # every change below is made after the upload

    late = (True, "0 of 100 (100 before the late policy)")
    on_time = (False, "100 of 100")

    def check(expected: tuple[bool, str]) -> None:
        seen = _everywhere(client, cli, page, tmp_path, submission_id=submission_id,
                           token=ada, student_id=ada_id)
        assert seen == dict.fromkeys(seen, expected)

    check(late)
    # A due date in the past needs a confirmation (the clock stands after every date here).
    refused = client.patch(f"/api/v1/assignments/{NAME}", headers=instructor_headers(),
                           json={"due_at": (DUE + dt.timedelta(days=2)).isoformat()})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "due_date_in_past"
    check(late)
    configure(client, due_at=DUE + dt.timedelta(days=2), confirm_past_due=True)  # later: on time
    check(on_time)
    assert client.get(f"/api/v1/assignments/{NAME}", headers=bearer(ada)).json()["you"][
        "due_at"] == "2026-12-17T23:59:00Z"
    configure(client, due_at=DUE, confirm_past_due=True)  # earlier again: late
    check(late)

    granted = cli(course_cli.main, ["extend", NAME, str(ada_id), "--days", "1", "--reason",
                                    "accommodation"], INSTRUCTOR_TOKEN)
    assert "now due 2026-12-16 23:59 UTC" in granted
    check(on_time)
    mine = client.get(f"/api/v1/assignments/{NAME}", headers=bearer(ada)).json()["you"]
    assert mine == {**mine, "due_at": "2026-12-16T23:59:00Z", "extension": True}
    # Moving the class-wide date moves an extension given in days with it.
    configure(client, due_at=DUE - dt.timedelta(days=1), confirm_past_due=True)
    check(late)
    configure(client, due_at=DUE, confirm_past_due=True)
    check(on_time)

    cli(course_cli.main, ["revoke-extension", NAME, str(ada_id)], INSTRUCTOR_TOKEN)
    check(late)

    actions = [e.action for e in db_session.scalars(
        select(AuditEvent).where(AuditEvent.action.in_(
            ["assignment.update", "extension.grant", "extension.revoke"]))
        .order_by(AuditEvent.id))]
    assert actions == ["assignment.update"] * 3 + ["extension.grant"] \
        + ["assignment.update"] * 2 + ["extension.revoke"]


def test_an_extension_date_lets_a_refuse_policy_upload_through(client, db_session) -> None:
    configure(client, due_at=DUE, late_policy="refuse")
    Clock(client, DUE + dt.timedelta(hours=3))
    ada_id, ada = create_student(client, "ada")
    _, bob = create_student(client, "bob")
    response = client.put(f"/api/v1/assignments/{NAME}/extensions/{ada_id}",
                          json={"due_at": "2026-12-16T12:00:00Z", "reason": "illness"},
                          headers=instructor_headers())
    assert response.status_code == 200, response.text
    assert response.json()["due_in_force"] == "2026-12-16T12:00:00Z"
    assert response.json()["granted_by"] == "GRADER_INSTRUCTOR_TOKEN (bootstrap)"
    submission_id = upload_graded(client, db_session, ada, make_outcome(speedup=None))
    assert client.get(f"/api/v1/submissions/{submission_id}",
                      headers=bearer(ada)).json()["late"] is False
    refused = client.post("/api/v1/submissions", files={"file": ("k.py", b"x=1\n")},
                          data={"assignment": NAME}, headers=bearer(bob))
    assert refused.json()["error"]["code"] == "assignment_closed"
    # The final run waits for the last due date in force.
    early = client.post(f"/api/v1/assignments/{NAME}/final-run", headers=instructor_headers())
    assert early.json()["error"] == {**early.json()["error"], "code": "before_due_date",
                                     "due_at": "2026-12-16T12:00:00Z"}


@pytest.mark.parametrize(("body", "code"), [
    ({"reason": "x"}, "extension_invalid"),
    ({"due_at": "2026-12-16T12:00:00Z", "extra_days": 1, "reason": "x"}, "extension_invalid"),
    ({"extra_days": 1, "reason": "   "}, "extension_invalid"),
    ({"extra_days": 1, "reason": "a\u0000b"}, "extension_invalid"),
])
def test_extension_terms_are_checked(client, body, code) -> None:
    configure(client, due_at=DUE)
    ada_id, _ = create_student(client, "ada")
    response = client.put(f"/api/v1/assignments/{NAME}/extensions/{ada_id}", json=body,
                          headers=instructor_headers())
    assert response.status_code == 422 and response.json()["error"]["code"] == code
    missing = client.delete(f"/api/v1/assignments/{NAME}/extensions/{ada_id}",
                            headers=instructor_headers())
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "extension_not_found"


def test_extensions_csv_reports_every_bad_row_then_imports_all(client, cli, tmp_path) -> None:
    configure(client, due_at=DUE)
    for name in ("ada", "bob", "cy"):
        client.post("/api/v1/students", json={"name": name, "email": f"{name}@example.edu"},
                    headers=instructor_headers())
    bad = ("email,extra_days,due_at,reason\n"
           "ada@example.edu,2,,accommodation\n"
           "nobody@example.edu,2,,x\n"
           "bob@example.edu,,,x\n"
           "cy@example.edu,1,2026-12-20T00:00:00,x\n"
           "ada@example.edu,3,,again\n")
    headers = {**instructor_headers(), "Content-Type": "text/csv"}
    refused = client.post(f"/api/v1/assignments/{NAME}/extensions/import", content=bad,
                          headers=headers)
    assert refused.status_code == 422, refused.text
    errors = refused.json()["error"]["errors"]
    assert [e["line"] for e in errors] == [3, 4, 5, 6], errors
    assert client.get(f"/api/v1/assignments/{NAME}/extensions",
                      headers=instructor_headers()).json()["extensions"] == []
    good = ("email,extra_days,due_at,reason\nada@example.edu,2,,accommodation\n"
            "bob@example.edu,,2026-12-20T00:00:00Z,travel\n")
    imported = client.post(f"/api/v1/assignments/{NAME}/extensions/import", content=good,
                           headers=headers)
    assert imported.status_code == 200, imported.text
    assert [(e["student_name"], e["due_in_force"]) for e in imported.json()["extensions"]] == [
        ("ada", "2026-12-17T23:59:00Z"), ("bob", "2026-12-20T00:00:00Z")]
    # The same from the CLI: an import replaces earlier terms; the listing shows them.
    again = tmp_path / "extensions.csv"
    again.write_text("name,extra_days,reason\ncy,3,injury\nada,1,accommodation\n")
    listed = cli(course_cli.main, ["import-extensions", NAME, str(again)], INSTRUCTOR_TOKEN)
    ids = {s["name"]: s["id"] for s in client.get("/api/v1/students",
                                                   headers=instructor_headers()).json()}
    assert f"cy ({ids['cy']})" in listed and "+3 days" in listed
    cells = [re.sub(r"\s+", " ", c).strip() for c in re.split(
        r"[│┃]", cli(course_cli.main, ["extensions", NAME], INSTRUCTOR_TOKEN))]
    ada, bob = f"ada ({ids['ada']})", f"bob ({ids['bob']})"
    assert [ada, "2026-12-16 23:59 UTC", "+1 days", "accommodation"] == cells[
        cells.index(ada):cells.index(ada) + 4]
    assert [bob, "2026-12-20 00:00 UTC", "until 2026-12-20 00:00 UTC", "travel"] == cells[
        cells.index(bob):cells.index(bob) + 4]
