"""The LMS API's roles and errors: instructors register platforms and rotate the key, TAs
read the sync states and sync, students do neither; a taken or malformed registration is
refused with its code."""

from __future__ import annotations

from fastapi.testclient import TestClient

from ..helpers import bearer, create_staff, create_student, instructor_headers

FIELDS = {"issuer": "https://moodle.example.edu", "client_id": "AbC123",
          "deployment_ids": ["1"], "auth_login_url": "https://moodle.example.edu/mod/lti/auth.php",
          "auth_token_url": "https://moodle.example.edu/mod/lti/token.php",
          "keyset_url": "https://moodle.example.edu/mod/lti/certs.php"}


def test_roles_and_errors(client: TestClient) -> None:
    _, student = create_student(client, "ada")
    _, ta = create_staff(client, "grace", "ta")
    created = client.post("/api/v1/lti/registrations", json=FIELDS, headers=instructor_headers())
    assert created.status_code == 201, created.text
    again = client.post("/api/v1/lti/registrations", json=FIELDS, headers=instructor_headers())
    assert again.status_code == 409 and again.json()["error"]["code"] == "lti_registration_taken"
    bad = client.post("/api/v1/lti/registrations", headers=instructor_headers(),
                      json={**FIELDS, "client_id": "x", "keyset_url": "javascript:alert(1)"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "lti_registration_invalid"

    for token, code in ((ta, "instructor_required"), (student, "instructor_required")):
        refused = client.post("/api/v1/lti/registrations", json=FIELDS, headers=bearer(token))
        assert refused.status_code == 403 and refused.json()["error"]["code"] == code
        rotate = client.post("/api/v1/lti/keys/rotate", headers=bearer(token))
        assert rotate.status_code == 403
    assert client.get("/api/v1/lti/status", headers=bearer(ta)).status_code == 200
    assert client.post("/api/v1/lti/sync", headers=bearer(ta)).json()["sent"] == 0
    assert client.get("/api/v1/lti/status", headers=bearer(student)).status_code == 403
    assert client.post("/api/v1/lti/sync", headers=bearer(student)).status_code == 403

    registration_id = created.json()["id"]
    assert client.delete(f"/api/v1/lti/registrations/{registration_id}",
                         headers=instructor_headers()).status_code == 204
    gone = client.delete(f"/api/v1/lti/registrations/{registration_id}",
                         headers=instructor_headers())
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "lti_registration_not_found"
    actions = [e["action"] for e in client.get("/api/v1/audit", headers=instructor_headers())
               .json()["events"]]
    assert "lti.register" in actions and "lti.unregister" in actions


def test_an_unregistered_platform_is_refused_at_login(client: TestClient) -> None:
    response = client.get("/lti/login", params={"iss": "https://lms.example", "login_hint": "1",
                                                "target_link_uri": "x"}, follow_redirects=False)
    assert response.status_code == 400
    assert "lti_unknown_platform" in response.text and "not registered" in response.text


def test_instructors_register_a_platform_on_the_page(client: TestClient) -> None:
    import re

    from ..helpers import INSTRUCTOR_TOKEN

    _, ta = create_staff(client, "grace", "ta")
    client.cookies.set("grader_session", ta)
    page = client.get("/lti")
    assert page.status_code == 200 and "Register a platform" not in page.text
    assert "/lti/login" in page.text and "/lti/jwks.json" in page.text

    client.cookies.set("grader_session", INSTRUCTOR_TOKEN)
    page = client.get("/lti")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    form = {**FIELDS, "deployment_ids": "1, 2", "csrf_token": csrf}
    done = client.post("/lti/registrations", data=form, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/lti"
    listed = client.get("/lti").text
    assert "<code>https://moodle.example.edu</code>" in listed and "1, 2" in listed
    refused = client.post("/lti/registrations", data={**form, "keyset_url": "nope"})
    assert refused.status_code == 422 and "lti_registration_invalid" in refused.text
