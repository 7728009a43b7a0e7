"""LTI 1.3 launches against a real platform (lti1p3platform): a learner lands signed in as
a student on the assignment's upload form, an instructor and a TA as staff; a replayed
nonce, a token for another tool, an expired token and one signed by a key the platform does
not publish are each refused with a page that says why."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from .conftest import launch, replay_fields
from .platform import INSTRUCTOR, TA, Platform


def test_learner_lands_signed_in_as_student_on_the_assignment(client: TestClient,
                                                              lms: Platform) -> None:
    lms.add_person("u-ada", "Ada Lovelace")
    response = launch(client, lms, "u-ada")
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/submit?assignment=softmax_backward"
    page = client.get(response.headers["location"])
    assert page.status_code == 200
    assert "Ada Lovelace" in page.text and "(student)" in page.text
    # The same person launching again is the same student (by the platform's sub).
    again = launch(client, lms, "u-ada")
    assert again.status_code == 303
    students = client.get("/api/v1/students", headers={"Authorization":
                                                       "Bearer instructor-test-token-0123456789"})
    assert [s["name"] for s in students.json()] == ["Ada Lovelace"]


@pytest.mark.parametrize(("role", "expected"), [(INSTRUCTOR, "instructor"), (TA, "ta")])
def test_staff_land_signed_in_with_their_role(client: TestClient, lms: Platform, role: str,
                                              expected: str) -> None:
    lms.add_person("u-grace", "Grace Hopper", role)
    response = launch(client, lms, "u-grace")
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/leaderboard?assignment=softmax_backward"
    page = client.get("/lti")
    assert page.status_code == 200
    assert f"Grace Hopper <span class=\"role\">({expected})</span>" in page.text
    assert "GPU kernels 101" in page.text


def _refused(response, code: str, words: str) -> None:  # noqa: ANN001
    assert response.status_code in (400, 403), response.text
    assert code in response.text and words in response.text
    assert "grader_session" not in response.headers.get("set-cookie", "")


def test_a_replayed_launch_is_refused(client: TestClient, lms: Platform) -> None:
    lms.add_person("u-ada", "Ada")
    fields = replay_fields(client, lms, "u-ada")
    first = client.post("/lti/launch", data=fields, follow_redirects=False)
    assert first.status_code == 303
    client.cookies.clear()
    _refused(client.post("/lti/launch", data=fields, follow_redirects=False),
             "lti_nonce_replayed", "already used")


@pytest.mark.parametrize(("knob", "code", "words"), [
    ("other_tool", "lti_token_invalid", "for another tool"),
    ("expired", "lti_token_invalid", "has expired"),
    ("rogue_key", "lti_unknown_key", "does not publish"),
])
def test_a_bad_id_token_is_refused_with_a_clear_page(client: TestClient, lms: Platform,
                                                     knob: str, code: str, words: str) -> None:
    lms.add_person("u-eve", "Eve")
    _refused(launch(client, lms, "u-eve", knob=knob), code, words)
    assert client.get("/", follow_redirects=False).status_code == 303  # not signed in
