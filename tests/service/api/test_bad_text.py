"""Inputs that gave a 500 (issue 24), on SQLite and PostgreSQL: a NUL character in any text
the service stores or filters on is a 422 naming the field (PostgreSQL cannot store it), and
an error answer that echoes what was sent (a lone surrogate, NaN, an infinity) still
serialises. Nothing is stored by a refused request."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from submissions.models import AuditEvent, StaffMember, Student

from ..helpers import (
    bearer,
    create_student,
    instructor_headers,
    make_outcome,
    upload_graded,
)

NUL = "a\x00b"


def _json(client, method: str, path: str, raw: str, headers: dict[str, str]):
    """Send `raw` as the JSON body as it is (so that ``\\ud800`` and ``1e400`` reach the
    server's parser unchanged)."""
    return client.request(method, path, content=raw.encode(),
                          headers={**headers, "content-type": "application/json"})


def _assert_422_naming(response, field: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error", error
    assert any(field in [str(part) for part in e["loc"]] for e in error["errors"]), error


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/v1/students", {"name": NUL}, "name"),
    ("/api/v1/students", {"name": "ada", "email": "a\x00@example.edu"}, "email"),
    ("/api/v1/students", {"name": "ada", "external_id": NUL}, "external_id"),
    ("/api/v1/staff", {"name": NUL, "role": "ta"}, "name"),
])
def test_nul_in_a_stored_name_is_422_naming_the_field(client, db_session, path, body,
                                                      field) -> None:
    response = client.post(path, json=body, headers=instructor_headers())
    _assert_422_naming(response, field)
    assert db_session.scalar(select(func.count()).select_from(Student)) == 0
    assert db_session.scalar(select(func.count()).select_from(StaffMember)) == 0


def test_nul_in_a_disqualification_reason_and_a_regrade_is_422(client, db_session) -> None:
    _, token = create_student(client, "ada")
    submission_id = upload_graded(client, db_session, token, make_outcome())
    response = client.post(f"/api/v1/submissions/{submission_id}/disqualify",
                           json={"reason": NUL}, headers=instructor_headers())
    _assert_422_naming(response, "reason")
    response = client.post(f"/api/v1/submissions/{submission_id}/restore",
                           json={"reason": NUL}, headers=instructor_headers())
    _assert_422_naming(response, "reason")
    response = client.post("/api/v1/regrades", headers=instructor_headers(),
                           json={"assignment": "softmax_backward", "grader_version": NUL})
    _assert_422_naming(response, "grader_version")
    response = client.post("/api/v1/regrades", headers=instructor_headers(),
                           json={"assignment": NUL})
    _assert_422_naming(response, "assignment")
    assert db_session.scalar(select(func.count()).select_from(AuditEvent)
                             .where(AuditEvent.action.like("submission.%"))) == 0


def test_nul_in_a_roster_row_is_422_with_its_line(client, db_session) -> None:
    roster = "name,email,id\nada,ada@example.edu,s1\nbob\x00,bob@example.edu,s2\n"
    response = client.post("/api/v1/students/import", content=roster.encode(),
                           headers={**instructor_headers(), "content-type": "text/csv"})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "roster_invalid" and error["errors"][0]["line"] == 3
    assert db_session.scalar(select(func.count()).select_from(Student)) == 0


@pytest.mark.parametrize(("path", "parameter"), [
    ("/api/v1/audit", "action"),
    ("/api/v1/audit", "assignment"),
    ("/api/v1/audit", "target_type"),
    ("/api/v1/audit", "target_id"),
    ("/api/v1/regrades", "assignment"),
    ("/api/v1/submissions", "assignment"),
    ("/api/v1/leaderboard", "assignment"),
])
def test_nul_in_a_filter_is_422_naming_the_parameter(client, path, parameter) -> None:
    response = client.get(path, params={parameter: NUL}, headers=instructor_headers())
    _assert_422_naming(response, parameter)


@pytest.mark.parametrize("raw", [
    '{"name": "\\ud800"}',                      # a lone surrogate, stored as a name
    '{"name": "' + "\\ud800" * 201 + '"}',      # a lone surrogate echoed by a 422 (too long)
    '{"name": "ada", "email": "\\udfff"}',
])
def test_lone_surrogates_are_422_and_the_answer_serialises(client, db_session, raw) -> None:
    response = _json(client, "POST", "/api/v1/students", raw, instructor_headers())
    assert response.status_code == 422, response.text
    json.loads(response.content.decode("utf-8"))  # strict UTF-8, valid JSON
    assert db_session.scalar(select(func.count()).select_from(Student)) == 0


@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity"])
def test_non_finite_numbers_are_422_and_the_answer_serialises(client, number) -> None:
    raw = ('{"correctness_points": 1, "speed_points": [{"min_speedup": ' + number
           + ', "points": 1}]}')
    response = _json(client, "PATCH", "/api/v1/assignments/softmax_backward", raw,
                     instructor_headers())
    assert response.status_code == 422, response.text
    body = json.loads(response.content, parse_constant=lambda name: pytest.fail(name))
    assert body["error"]["code"] == "validation_error"


def test_nul_in_a_page_form_is_422_naming_the_field(client) -> None:
    _, token = create_student(client, "ada")
    # The sign-in form: its CSRF cookie and field first, then a token with a NUL.
    page = client.get("/sign-in")
    csrf = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    response = client.post("/sign-in", data={"csrf_token": csrf, "token": token + "\x00"},
                           headers={"accept": "text/html"})
    assert response.status_code == 422, response.text
    assert "token" in response.text
    assert client.get("/api/v1/me", headers=bearer(token)).status_code == 200
