"""POST /api/v1/students/import: a roster CSV creates students with tokens (JSON or CSV
out), matches existing ones, and is all or nothing."""

from __future__ import annotations

import csv
import io

from sqlalchemy import select

from submissions.models import AuditEvent, Student

from ..helpers import bearer, create_staff, create_student, instructor_headers

ROSTER = (
    "\ufeffName,E-mail,Student ID,Section\n"
    "Ada Lovelace,ada@example.edu,s001,A\n"
    "\n"
    "Alan Turing,,s002,B\n"
    "Grace Hopper,GRACE@example.edu,,A\n"
)


def _import(client, text: str, token: str | None = None, **params):
    headers = bearer(token) if token else instructor_headers()
    return client.post("/api/v1/students/import", content=text.encode(), params=params,
                       headers={**headers, "Content-Type": "text/csv"})


def test_import_creates_students_with_tokens_that_work(client, db_session) -> None:
    response = _import(client, ROSTER)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["existing"] == []
    created = {s["name"]: s for s in body["created"]}
    assert set(created) == {"Ada Lovelace", "Alan Turing", "Grace Hopper"}
    assert created["Grace Hopper"]["email"] == "grace@example.edu"
    assert created["Alan Turing"]["external_id"] == "s002" and created["Alan Turing"]["email"] is None
    for student in created.values():
        me = client.get("/api/v1/me", headers=bearer(student["token"])).json()
        assert me == {"role": "student", "id": student["id"], "name": student["name"]}
    [event] = db_session.scalars(select(AuditEvent).where(AuditEvent.action == "student.import"))
    assert event.details["rows"] == 3 and len(event.details["created"]) == 3
    assert all(s["token"] not in str(event.details) for s in created.values())


def test_reimport_matches_existing_students_fills_in_fields_and_exports_csv(client, db_session) -> None:
    ada_id, ada_token = create_student(client, "ada lovelace")  # added by hand, no e-mail
    response = _import(client, ROSTER, format="csv")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [r["name"] for r in rows] == ["ada lovelace", "Alan Turing", "Grace Hopper"]
    assert rows[0]["token"] == "" and rows[0]["student_id"] == str(ada_id)  # keeps her token
    assert rows[0]["email"] == "ada@example.edu" and rows[0]["id"] == "s001"  # filled in
    assert all(r["token"].startswith("gst_") for r in rows[1:])
    assert client.get("/api/v1/me", headers=bearer(ada_token)).status_code == 200
    again = _import(client, ROSTER).json()  # idempotent
    assert again["created"] == [] and len(again["existing"]) == 3


def test_a_bad_roster_imports_nothing_and_lists_every_problem(client, db_session) -> None:
    bad = ("name,email,id\n"
           "Ada,ada@example.edu,s001\n"
           ",nobody@example.edu,s009\n"
           "Bob,bob-at-example,s002\n"
           "ADA ,other@example.edu,s003\n")
    response = _import(client, bad)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "roster_invalid"
    assert [(e["line"], e["message"].split(":")[0]) for e in error["errors"]] == [
        (3, "no name"), (4, "not an e-mail address"), (5, "the same name as line 2")]
    assert db_session.scalars(select(Student)).all() == []

    no_name = _import(client, "email,id\nada@example.edu,s1\n")
    assert no_name.json()["error"]["code"] == "roster_invalid"
    assert "no `name` column" in no_name.json()["error"]["message"]


def test_a_row_that_contradicts_an_existing_student_is_refused(client) -> None:
    client.post("/api/v1/students", json={"name": "Ada", "email": "ada@example.edu",
                                          "external_id": "s001"}, headers=instructor_headers())
    response = _import(client, "name,email,id\nAda,ada@example.edu,s999\n")
    assert response.status_code == 422
    assert "has external_id 's001'" in response.json()["error"]["errors"][0]["message"]
    response = _import(client, "name,email,id\nBob,ada@example.edu,s002\nCarl,,s002\n")
    errors = response.json()["error"]["errors"]
    # Both problems at once: line 2 matches Ada by e-mail and contradicts her id, line 3
    # repeats line 2's id.
    assert [(e["line"], e["message"]) for e in errors][1] == (3, "the same id as line 2")
    assert errors[0]["line"] == 2 and "has external_id 's001'" in errors[0]["message"]


def test_import_needs_an_instructor_and_a_csv_body(client) -> None:
    _, ta = create_staff(client)
    assert _import(client, ROSTER, token=ta).json()["error"]["code"] == "instructor_required"
    wrong_type = client.post("/api/v1/students/import", json={"name": "x"},
                             headers=instructor_headers())
    assert wrong_type.status_code == 422
    assert wrong_type.json()["error"]["code"] == "upload_malformed"
    latin1 = client.post("/api/v1/students/import", content="name\nJosé\n".encode("latin-1"),
                         headers={**instructor_headers(), "Content-Type": "text/csv"})
    assert latin1.json()["error"]["code"] == "source_not_utf8"


def test_every_bad_row_is_reported_in_one_pass(client, db_session) -> None:
    """The rows' own problems and their clashes with enrolled students come back together,
    so a roster with four bad rows takes one round of fixes."""
    client.post("/api/v1/students", json={"name": "Ada", "email": "ada@example.edu",
                                          "external_id": "s001"}, headers=instructor_headers())
    bad = ("name,email,id\n"
           "Ada,ada@example.edu,s999\n"      # contradicts the enrolled Ada's id
           ",x@example.edu,s010\n"           # no name
           "Bob,bob-at-example,s002\n"       # malformed e-mail
           "Cy,cy@example.edu,s003\n"        # fine
           "Dee,ada@example.edu,s004\n")     # line 2's e-mail, and Ada's with another id
    response = _import(client, bad)
    assert response.status_code == 422
    lines = [e["line"] for e in response.json()["error"]["errors"]]
    assert sorted(set(lines)) == [2, 3, 4, 6]  # line 5 is fine; line 6 has two problems
    assert [s.name for s in db_session.scalars(select(Student))] == ["Ada"]
