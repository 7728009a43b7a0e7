"""The roles matrix: every endpoint, called by nobody, a student, a TA, an instructor account
and the bootstrap instructor (GRADER_INSTRUCTOR_TOKEN). Instructors: everything; TAs: read
everything, regrade, disqualify and restore, no settings, no tokens; students: their own."""

from __future__ import annotations

import pytest

from ..helpers import (
    INSTRUCTOR_TOKEN,
    bearer,
    create_staff,
    create_student,
    grade_next,
    kernel_source,
    make_outcome,
    upload,
)

ROLES = ("anonymous", "student", "ta", "instructor", "bootstrap")
ANY = set(ROLES) - {"anonymous"}
STAFF = {"ta", "instructor", "bootstrap"}
INSTRUCTORS = {"instructor", "bootstrap"}

# (method, path template, JSON body or None, roles allowed, code for the other roles);
# an allowed GET answers 200 (the final run: 404 final_run_not_found, there is none yet).
ENDPOINTS = [
    ("GET", "/api/v1/me", None, ANY, None),
    ("GET", "/api/v1/assignments", None, ANY, None),
    ("GET", "/api/v1/assignments/softmax_backward", None, ANY, None),
    ("PATCH", "/api/v1/assignments/softmax_backward", {"max_submissions": 50}, INSTRUCTORS,
     "instructor_required"),
    ("POST", "/api/v1/assignments/softmax_backward/final-run", None, INSTRUCTORS,
     "instructor_required"),
    ("GET", "/api/v1/assignments/softmax_backward/final-run", None, STAFF, "staff_required"),
    ("GET", "/api/v1/assignments/softmax_backward/export/lms", None, STAFF, "staff_required"),
    ("GET", "/api/v1/assignments/export/canvas", None, STAFF, "staff_required"),
    ("GET", "/api/v1/assignments/export/moodle", None, STAFF, "staff_required"),
    ("GET", "/api/v1/assignments/softmax_backward/export/gradescope", None, STAFF,
     "staff_required"),
    ("GET", "/api/v1/assignments/softmax_backward/extensions", None, STAFF, "staff_required"),
    ("PUT", "/api/v1/assignments/softmax_backward/extensions/{victim}",
     {"extra_days": 1, "reason": "accommodation"}, INSTRUCTORS, "instructor_required"),
    ("DELETE", "/api/v1/assignments/softmax_backward/extensions/{victim}", None, INSTRUCTORS,
     "instructor_required"),
    ("POST", "/api/v1/students", {"name": "new-{role}"}, INSTRUCTORS, "instructor_required"),
    ("GET", "/api/v1/students", None, STAFF, "staff_required"),
    ("GET", "/api/v1/students/{victim}", None, STAFF, "staff_required"),
    ("POST", "/api/v1/students/{victim}/token", None, INSTRUCTORS, "instructor_required"),
    ("POST", "/api/v1/staff", {"name": "staff-{role}", "role": "ta"}, INSTRUCTORS,
     "instructor_required"),
    ("GET", "/api/v1/staff", None, STAFF, "staff_required"),
    ("POST", "/api/v1/staff/{target_staff}/token", None, INSTRUCTORS, "instructor_required"),
    ("GET", "/api/v1/submissions", None, ANY, None),
    ("GET", "/api/v1/submissions/{other}", None, STAFF, "submission_not_found"),
    ("GET", "/api/v1/submissions/{other}/source", None, STAFF, "submission_not_found"),
    ("GET", "/api/v1/submissions/{other}/gradings", None, STAFF, "submission_not_found"),
    ("GET", "/api/v1/submissions/{other}/gradescope", None, STAFF, "submission_not_found"),
    ("GET", "/api/v1/submissions/{own}", None, ANY, None),
    ("GET", "/api/v1/submissions/{own}/source", None, ANY, None),
    ("GET", "/api/v1/submissions/{own}/gradings", None, ANY, None),
    ("GET", "/api/v1/submissions/{own}/gradescope", None, ANY, None),
    ("POST", "/api/v1/submissions/{own}/disqualify", {"reason": "copied"}, STAFF,
     "staff_required"),
    ("POST", "/api/v1/submissions/{own}/restore", {}, STAFF, "staff_required"),
    ("POST", "/api/v1/regrades", {"assignment": "softmax_backward"}, STAFF, "staff_required"),
    ("GET", "/api/v1/regrades", None, STAFF, "staff_required"),
    ("GET", "/api/v1/audit", None, STAFF, "staff_required"),
    ("GET", "/api/v1/leaderboard", None, ANY, None),
    ("GET", "/api/v1/leaderboard?format=csv", None, STAFF, "staff_required"),
]


@pytest.fixture
def world(client, db_session):
    """A student (`own` submission, graded), another student (`other`), a victim student, a
    TA, an instructor account and a staff account to rotate."""
    _, student = create_student(client, "stu")
    _, other_token = create_student(client, "other")
    victim, _ = create_student(client, "victim")
    _, ta = create_staff(client, "ta-1", "ta")
    _, instructor = create_staff(client, "prof", "instructor")
    target_staff, _ = create_staff(client, "target", "ta")
    own = upload(client, student, kernel_source()).json()["id"]
    other = upload(client, other_token, kernel_source()).json()["id"]
    grade_next(db_session, make_outcome(speedup=1.2))
    grade_next(db_session, make_outcome(speedup=1.1))
    tokens = {"anonymous": None, "student": student, "ta": ta, "instructor": instructor,
              "bootstrap": INSTRUCTOR_TOKEN}
    ids = {"own": own, "other": other, "victim": victim, "target_staff": target_staff}
    return tokens, ids


@pytest.mark.parametrize(("method", "path", "body", "allowed", "denied_code"), ENDPOINTS,
                         ids=[f"{m} {p}" for m, p, *_ in ENDPOINTS])
def test_roles_matrix(client, world, method, path, body, allowed, denied_code) -> None:
    tokens, ids = world
    for role in ROLES:
        url = path.format(**ids, role=role)
        json_body = None if body is None else {
            k: (v.format(role=role) if isinstance(v, str) else v) for k, v in body.items()}
        headers = bearer(tokens[role]) if tokens[role] else {}
        response = client.request(method, url, json=json_body, headers=headers)
        outcome = (role, response.status_code, response.text[:200])
        if role == "anonymous":
            assert response.status_code == 401, outcome
            assert response.json()["error"]["code"] == "not_authenticated"
        elif role in allowed:
            assert response.status_code not in (401, 403), outcome
            if method == "GET" and path.endswith("/final-run"):
                assert response.json()["error"]["code"] == "final_run_not_found", outcome
            elif method == "GET":
                assert response.status_code == 200, outcome
        else:
            assert response.status_code in (403, 404), outcome
            assert response.json()["error"]["code"] == denied_code, outcome


def test_uploads_are_for_students_only(client, world) -> None:
    tokens, _ids = world
    for role in ("ta", "instructor", "bootstrap"):
        response = upload(client, tokens[role], kernel_source())
        assert response.status_code == 403 and response.json()["error"]["code"] == "student_required"
    assert upload(client, tokens["student"], kernel_source()).status_code == 202


def test_me_says_who_the_token_belongs_to(client, world) -> None:
    tokens, _ids = world
    roles = {role: client.get("/api/v1/me", headers=bearer(tokens[role])).json()
             for role in ANY}
    assert {role: (me["role"], me["name"]) for role, me in roles.items()} == {
        "student": ("student", "stu"), "ta": ("ta", "ta-1"), "instructor": ("instructor", "prof"),
        "bootstrap": ("instructor", "GRADER_INSTRUCTOR_TOKEN")}
    assert roles["bootstrap"]["id"] is None


def test_staff_see_staff_only_fields_and_students_do_not(client, world) -> None:
    tokens, ids = world
    student_view = client.get(f"/api/v1/submissions/{ids['own']}",
                              headers=bearer(tokens["student"])).json()
    ta_view = client.get(f"/api/v1/submissions/{ids['own']}", headers=bearer(tokens["ta"])).json()
    assert student_view["seed"] is None and student_view["grader_exit_code"] is None
    assert "seed" not in student_view["result"]
    assert ta_view["seed"] is not None and ta_view["result"]["seed"] == 1234
    everyone = client.get("/api/v1/submissions", headers=bearer(tokens["ta"])).json()
    assert {s["id"] for s in everyone["submissions"]} == {ids["own"], ids["other"]}
