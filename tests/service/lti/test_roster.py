"""NRPS against a real platform (lti1p3platform): a roster sync adds the course's learners as
students (by the platform's sub, never by name), keeps them on the next sync, marks those
who left or went inactive as dropped (their account and work stay), and shows what changed
on the roster page; staff are not made students."""

from __future__ import annotations

from fastapi.testclient import TestClient

from ..helpers import INSTRUCTOR_TOKEN, instructor_headers
from .conftest import launch
from .platform import INSTRUCTOR, Platform


def _sync(client: TestClient) -> dict:
    response = client.post("/api/v1/lti/sync", headers=instructor_headers())
    assert response.status_code == 200, response.text
    return response.json()


def _students(client: TestClient) -> list[str]:
    return sorted(s["name"] for s in client.get("/api/v1/students",
                                                headers=instructor_headers()).json())


def test_roster_sync_adds_keeps_and_marks_dropped_students(client: TestClient,
                                                           lms: Platform) -> None:
    lms.add_person("u-prof", "Prof Knuth", INSTRUCTOR)
    assert launch(client, lms, "u-prof").status_code == 303  # the course becomes known
    client.cookies.clear()
    lms.add_person("u-ada", "Ada")
    lms.add_person("u-bob", "Bob")
    # A student already on the roster with the same name (a token account): never merged.
    assert client.post("/api/v1/students", json={"name": "Bob"},
                       headers=instructor_headers()).status_code == 201

    run = _sync(client)
    (changes,) = run["rosters"].values()
    assert sorted(changes["added"]) == ["Ada", "Bob (u-bob)"] and changes["dropped"] == []
    assert _students(client) == ["Ada", "Bob", "Bob (u-bob)"]

    # Bob leaves, Cy joins, Ada's name changes on the platform: Ada is kept (same sub).
    del lms.course.people["u-bob"]
    lms.add_person("u-cy", "Cy")
    lms.course.people["u-ada"].name = "Ada King"
    (changes,) = _sync(client)["rosters"].values()
    assert changes == {"added": ["Cy"], "rejoined": [], "dropped": ["Bob (u-bob)"], "kept": 1}
    assert _students(client) == ["Ada", "Bob", "Bob (u-bob)", "Cy"]

    # Inactive on the platform is dropped too; back to active is a rejoin.
    lms.course.people["u-cy"].status = "Inactive"
    (changes,) = _sync(client)["rosters"].values()
    assert changes["dropped"] == ["Cy"] and changes["kept"] == 1
    lms.course.people["u-cy"].status = "Active"
    (changes,) = _sync(client)["rosters"].values()
    assert changes["rejoined"] == ["Cy"]

    status = client.get("/api/v1/lti/status", headers=instructor_headers()).json()
    members = {m["sub"]: m for m in status["contexts"][0]["members"]}
    assert members["u-bob"]["status"] == "dropped" and members["u-ada"]["status"] == "active"
    assert members["u-prof"]["role"] == "instructor" and members["u-prof"]["student_id"] is None

    client.cookies.set("grader_session", INSTRUCTOR_TOKEN)
    roster = client.get("/staff/students")
    assert roster.status_code == 200
    assert "rejoined 1 (Cy)" in roster.text
    assert 'Bob (u-bob)</a> <span class="lti-dropped">dropped in the LMS</span>' in roster.text


def test_the_scheduled_sync_reads_the_roster_without_anyone_asking(
        client: TestClient, lms: Platform, session_factory, settings) -> None:
    from submissions.lti.sync import LtiSyncLoop

    from ..helpers import wait_until

    lms.add_person("u-prof", "Prof Knuth", INSTRUCTOR)
    assert launch(client, lms, "u-prof").status_code == 303
    lms.add_person("u-ada", "Ada")
    # A lease far longer than the test: its renewal thread would share this test's one
    # connection with the round (the lease's renewal under load: test_sync_lease.py, whose
    # loops have a database of their own).
    loop = LtiSyncLoop(session_factory, settings.model_copy(update={"lti_sync_interval_s": 0.2}),
                       lease_s=600.0)
    loop.start()
    try:
        wait_until(lambda: lms.course.roster_reads > 0, timeout=20, message="a scheduled sync")
    finally:
        loop.stop(timeout_s=20)
    assert _students(client) == ["Ada"]
