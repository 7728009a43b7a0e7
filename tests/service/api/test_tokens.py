"""Token rotation (students and staff; by an instructor or by the owner) and staff accounts."""

from __future__ import annotations

from sqlalchemy import select

from submissions.models import AuditEvent, StaffMember

from ..helpers import bearer, create_staff, create_student, instructor_headers


def test_instructor_rotates_a_students_token(client, db_session) -> None:
    student_id, old = create_student(client, "ada")
    _, instructor = create_staff(client, "prof", "instructor")
    response = client.post(f"/api/v1/students/{student_id}/token", headers=bearer(instructor))
    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "student" and body["id"] == student_id and body["name"] == "ada"
    new = body["token"]
    assert new.startswith("gst_") and new != old
    assert client.get("/api/v1/me", headers=bearer(old)).status_code == 401
    assert client.get("/api/v1/me", headers=bearer(new)).json()["id"] == student_id
    student = client.get(f"/api/v1/students/{student_id}", headers=bearer(instructor)).json()
    assert student["token_rotated_at"] is not None
    [event] = db_session.scalars(select(AuditEvent).where(
        AuditEvent.action == "student.rotate_token")).all()
    assert (event.actor_name, event.actor_kind, event.target_id) == ("prof", "instructor",
                                                                     str(student_id))
    assert new not in str(event.details) and old not in str(event.details)
    missing = client.post("/api/v1/students/424242/token", headers=instructor_headers())
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "student_not_found"


def test_a_student_rotates_their_own_token(client) -> None:
    _, old = create_student(client, "ada")
    response = client.post("/api/v1/me/token", headers=bearer(old))
    assert response.status_code == 200
    new = response.json()["token"]
    assert client.get("/api/v1/submissions", headers=bearer(old)).status_code == 401
    assert client.get("/api/v1/submissions", headers=bearer(new)).status_code == 200


def test_staff_accounts_have_personal_rotatable_tokens(client, db_session) -> None:
    ta_id, ta = create_staff(client, "Grace", "ta")
    assert ta.startswith("gsf_")
    stored = db_session.get(StaffMember, ta_id)
    assert stored.role == "ta" and ta not in stored.token_sha256
    listed = client.get("/api/v1/staff", headers=bearer(ta)).json()
    assert [(s["name"], s["role"]) for s in listed] == [("Grace", "ta")]
    assert "token" not in listed[0]

    duplicate = client.post("/api/v1/staff", json={"name": " grace ", "role": "instructor"},
                            headers=instructor_headers())
    assert duplicate.status_code == 409 and duplicate.json()["error"]["code"] == "staff_name_taken"

    # Self-rotation, then an instructor's rotation (which is also how access is revoked).
    own = client.post("/api/v1/me/token", headers=bearer(ta)).json()["token"]
    assert client.get("/api/v1/me", headers=bearer(ta)).status_code == 401
    assert client.get("/api/v1/me", headers=bearer(own)).json()["role"] == "ta"
    revoked = client.post(f"/api/v1/staff/{ta_id}/token", headers=instructor_headers()).json()
    assert client.get("/api/v1/students", headers=bearer(own)).status_code == 401
    assert client.get("/api/v1/students", headers=bearer(revoked["token"])).status_code == 200
    actions = [e.action for e in db_session.scalars(select(AuditEvent).order_by(AuditEvent.id))]
    assert actions == ["staff.create", "staff.rotate_token", "staff.rotate_token"]


def test_the_bootstrap_token_is_not_rotated_through_the_api(client) -> None:
    response = client.post("/api/v1/me/token", headers=instructor_headers())
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "token_not_rotatable"
    assert "GRADER_INSTRUCTOR_TOKEN" in response.json()["error"]["message"]


def test_students_with_roster_fields(client) -> None:
    response = client.post("/api/v1/students", json={
        "name": "Ada", "email": " Ada@Example.EDU ", "external_id": "s001"},
        headers=instructor_headers())
    assert response.status_code == 201
    assert (response.json()["email"], response.json()["external_id"]) == ("ada@example.edu", "s001")
    for body, code in (({"name": "Other", "email": "ADA@example.edu"}, "student_email_taken"),
                       ({"name": "Other", "external_id": "s001"}, "student_external_id_taken"),
                       ({"name": "Other", "email": "not-an-email"}, "student_field_invalid")):
        refused = client.post("/api/v1/students", json=body, headers=instructor_headers())
        assert refused.json()["error"]["code"] == code, refused.text
