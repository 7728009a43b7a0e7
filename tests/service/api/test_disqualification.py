"""Disqualify / restore (staff): hidden from rankings, visible to the student with the
reason, audited."""

from __future__ import annotations

from sqlalchemy import select

from submissions.models import AuditEvent

from ..helpers import (
    bearer,
    create_staff,
    create_student,
    instructor_headers,
    make_outcome,
    upload_graded,
)


def test_disqualify_hides_from_the_ranking_and_tells_the_student_why(client, db_session) -> None:
    _, ada = create_student(client, "ada")
    _, bob = create_student(client, "bob")
    ada_fast = upload_graded(client, db_session, ada, make_outcome(speedup=3.0))
    ada_slow = upload_graded(client, db_session, ada, make_outcome(speedup=1.1))
    upload_graded(client, db_session, bob, make_outcome(speedup=2.0))
    _, ta = create_staff(client, "grace", "ta")

    response = client.post(f"/api/v1/submissions/{ada_fast}/disqualify",
                           json={"reason": "hard-codes the benchmark shapes"}, headers=bearer(ta))
    assert response.status_code == 200, response.text
    assert response.json()["disqualification"]["by"] == "grace (ta)"

    # Hidden from the ranking: ada's next best submission ranks instead.
    board = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()["rows"]
    assert [(r["student_name"], r["submission_id"]) for r in board] == [
        ("bob", board[0]["submission_id"]), ("ada", ada_slow)]
    # The student sees it, with the reason (not who did it), and scores nothing for it.
    seen = client.get(f"/api/v1/submissions/{ada_fast}", headers=bearer(ada)).json()
    assert seen["disqualified"] is True
    assert seen["disqualification"]["reason"] == "hard-codes the benchmark shapes"
    assert seen["disqualification"]["by"] is None and seen["disqualification"]["at"]
    listed = client.get("/api/v1/submissions", headers=bearer(ada)).json()["submissions"]
    assert {s["id"]: s["disqualified"] for s in listed} == {ada_fast: True, ada_slow: False}
    gradescope = client.get(f"/api/v1/submissions/{ada_fast}/gradescope", headers=bearer(ada)).json()
    assert gradescope["score"] == 0 and "hard-codes the benchmark shapes" in gradescope["output"]

    again = client.post(f"/api/v1/submissions/{ada_fast}/disqualify", json={"reason": "x"},
                        headers=bearer(ta))
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_disqualified"
    blank = client.post(f"/api/v1/submissions/{ada_fast}/disqualify", json={"reason": ""},
                        headers=bearer(ta))
    assert blank.status_code == 422

    restored = client.post(f"/api/v1/submissions/{ada_fast}/restore",
                           json={"reason": "the shapes were the assignment's"}, headers=bearer(ta))
    assert restored.status_code == 200 and restored.json()["disqualification"] is None
    board = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()["rows"]
    assert [r["submission_id"] for r in board][0] == ada_fast
    not_disqualified = client.post(f"/api/v1/submissions/{ada_fast}/restore", json={},
                                   headers=bearer(ta))
    assert not_disqualified.json()["error"]["code"] == "not_disqualified"

    events = db_session.scalars(select(AuditEvent).where(
        AuditEvent.target_type == "submission").order_by(AuditEvent.id)).all()
    assert [(e.action, e.actor_name, e.details.get("reason")) for e in events] == [
        ("submission.disqualify", "grace", "hard-codes the benchmark shapes"),
        ("submission.restore", "grace", "the shapes were the assignment's")]
    assert events[1].details["disqualified_reason"] == "hard-codes the benchmark shapes"
    log = client.get("/api/v1/audit?target_type=submission", headers=bearer(ta)).json()["events"]
    assert [e["action"] for e in log] == ["submission.restore", "submission.disqualify"]
    assert log[0]["created_at"] and log[0]["actor_kind"] == "ta"


def test_a_missing_submission_is_404(client) -> None:
    response = client.post("/api/v1/submissions/9999/disqualify", json={"reason": "x"},
                           headers=instructor_headers())
    assert response.status_code == 404 and response.json()["error"]["code"] == "submission_not_found"
