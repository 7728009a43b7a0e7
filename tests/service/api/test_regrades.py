"""api/routes/regrades.py: choose, re-run, preview side by side, then apply or discard; both
gradings stay in each submission's history with the grader version that produced them."""

from __future__ import annotations

from sqlalchemy import select

from submissions.models import INFRASTRUCTURE_ERROR, AuditEvent, Grading

from ..helpers import (
    bearer,
    configure,
    create_staff,
    create_student,
    grade_next,
    instructor_headers,
    kernel_source,
    make_outcome,
    upload,
    upload_graded,
)


def _setup(client, db_session):
    """ada: a pass (1.0x) and a fail, graded by grader 1.0; bob: a pass (2.0x), grader 0.9."""
    configure(client, correctness_points=50,
              speed_points=[{"min_speedup": 1.0, "points": 10}, {"min_speedup": 1.5, "points": 50}])
    _, ada = create_student(client, "ada")
    _, bob = create_student(client, "bob")
    ids = {}
    for label, token, outcome in (
        ("ada_pass", ada, make_outcome(speedup=1.0, grader_version="1.0")),
        ("ada_fail", ada, make_outcome("failed", grader_version="1.0")),
        ("bob_pass", bob, make_outcome(speedup=2.0, grader_version="0.9")),
    ):
        ids[label] = upload_graded(client, db_session, token, outcome)
    _, ta = create_staff(client, "grace", "ta")
    return ids, {"ada": ada, "bob": bob, "ta": ta}


def _regrade(client, token, **selection):
    return client.post("/api/v1/regrades", json={"assignment": "softmax_backward", **selection},
                       headers=bearer(token))


def test_preview_then_apply(client, db_session) -> None:
    ids, tokens = _setup(client, db_session)
    created = _regrade(client, tokens["ta"], grader_version="1.0")
    assert created.status_code == 201, created.text
    batch = created.json()
    assert batch["state"] == "open" and batch["total"] == 2 and batch["pending"] == 2
    assert batch["selection"]["grader_version"] == "1.0"
    assert {r["submission_id"] for r in batch["rows"]} == {ids["ada_pass"], ids["ada_fail"]}

    # Nothing changes for the student while the batch is open, even once it is graded.
    grade_next(db_session, make_outcome("failed", grader_version="1.1"))           # ada_pass
    grade_next(db_session, make_outcome(speedup=1.6, grader_version="1.1"))        # ada_fail
    before = client.get(f"/api/v1/submissions/{ids['ada_pass']}", headers=bearer(tokens["ada"]))
    assert before.json()["status"] == "passed" and before.json()["grader_version"] == "1.0"

    preview = client.get(f"/api/v1/regrades/{batch['id']}", headers=bearer(tokens["ta"])).json()
    assert preview["pending"] == 0 and preview["changed"] == 2
    rows = {r["submission_id"]: r for r in preview["rows"]}
    lost, gained = rows[ids["ada_pass"]], rows[ids["ada_fail"]]
    assert (lost["before"]["status"], lost["after"]["status"]) == ("passed", "failed")
    assert (lost["before"]["score"]["total"], lost["after"]["score"]["total"]) == (60, 0)
    assert lost["verdict_changed"] and lost["score_delta"] == -60
    assert (lost["before"]["grader_version"], lost["after"]["grader_version"]) == ("1.0", "1.1")
    assert (gained["before"]["status"], gained["after"]["status"]) == ("failed", "passed")
    assert gained["after"]["score"]["total"] == 100 and gained["score_delta"] == 100
    assert not any(r["applied"] for r in preview["rows"])

    applied = client.post(f"/api/v1/regrades/{batch['id']}/apply", headers=bearer(tokens["ta"]))
    assert applied.status_code == 200, applied.text
    assert applied.json()["state"] == "applied" and applied.json()["unchanged"] == []
    assert all(r["applied"] for r in applied.json()["rows"])
    assert applied.json()["decided_by"] == "grace (ta)"

    after = client.get(f"/api/v1/submissions/{ids['ada_pass']}", headers=bearer(tokens["ada"])).json()
    assert after["status"] == "failed" and after["grader_version"] == "1.1"
    board = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()["rows"]
    assert [(r["student_name"], r["submission_id"]) for r in board] == [
        ("bob", ids["bob_pass"]), ("ada", ids["ada_fail"])]

    # Both gradings stay in the history, each with its grader version; the student sees it.
    history = client.get(f"/api/v1/submissions/{ids['ada_pass']}/gradings",
                         headers=bearer(tokens["ada"])).json()["gradings"]
    assert [(g["purpose"], g["status"], g["grader_version"], g["is_current"]) for g in history] == [
        ("submission", "passed", "1.0", False), ("regrade", "failed", "1.1", True)]
    assert history[1]["replaces_grading_id"] == history[0]["id"]
    assert all(g["seed"] is None and g["requested_by"] is None for g in history)
    staff_history = client.get(f"/api/v1/submissions/{ids['ada_pass']}/gradings",
                               headers=bearer(tokens["ta"])).json()["gradings"]
    assert staff_history[1]["requested_by"] == "grace (ta)"
    # A regrade re-runs the same inputs: the submission's own seed.
    assert staff_history[0]["seed"] == staff_history[1]["seed"] is not None

    again = client.post(f"/api/v1/regrades/{batch['id']}/apply", headers=bearer(tokens["ta"]))
    assert again.status_code == 409 and again.json()["error"]["code"] == "regrade_already_decided"
    actions = [e.action for e in db_session.scalars(
        select(AuditEvent).where(AuditEvent.target_type == "regrade").order_by(AuditEvent.id))]
    assert actions == ["regrade.create", "regrade.apply"]


def test_apply_waits_for_every_grading_and_skips_infrastructure_errors(client, db_session) -> None:
    ids, tokens = _setup(client, db_session)
    batch = _regrade(client, tokens["ta"], student_id=None, status="passed").json()
    assert {r["submission_id"] for r in batch["rows"]} == {ids["ada_pass"], ids["bob_pass"]}
    pending = client.post(f"/api/v1/regrades/{batch['id']}/apply", headers=bearer(tokens["ta"]))
    assert pending.status_code == 409
    assert pending.json()["error"] | {"message": ""} == {
        "code": "regrade_pending", "message": "", "pending": 2}
    grade_next(db_session, make_outcome("error", error_kind=INFRASTRUCTURE_ERROR))  # ada_pass
    grade_next(db_session, make_outcome(speedup=2.5, grader_version="1.1"))          # bob_pass
    applied = client.post(f"/api/v1/regrades/{batch['id']}/apply",
                          headers=bearer(tokens["ta"])).json()
    assert applied["unchanged"] == [ids["ada_pass"]]
    rows = {r["submission_id"]: r for r in applied["rows"]}
    assert not rows[ids["ada_pass"]]["applicable"] and not rows[ids["ada_pass"]]["applied"]
    assert rows[ids["bob_pass"]]["applied"]
    ada = client.get(f"/api/v1/submissions/{ids['ada_pass']}", headers=bearer(tokens["ada"])).json()
    assert ada["status"] == "passed"  # kept its grading: our fault is never applied


def test_discard_keeps_finished_gradings_in_the_history_and_drops_queued_ones(client, db_session) -> None:
    ids, tokens = _setup(client, db_session)
    batch = _regrade(client, tokens["ta"], submission_ids=[ids["ada_pass"], ids["bob_pass"]]).json()
    grade_next(db_session, make_outcome("failed", grader_version="1.1"))  # the first of the two
    discarded = client.post(f"/api/v1/regrades/{batch['id']}/discard",
                            headers=bearer(tokens["ta"])).json()
    assert discarded["state"] == "discarded" and discarded["total"] == 1
    assert db_session.scalars(select(Grading).where(Grading.status == "queued")).all() == []
    history = client.get(f"/api/v1/submissions/{ids['ada_pass']}/gradings",
                         headers=bearer(tokens["ada"])).json()["gradings"]
    assert [(g["status"], g["is_current"]) for g in history] == [("passed", True), ("failed", False)]
    assert client.get(f"/api/v1/submissions/{ids['ada_pass']}",
                      headers=bearer(tokens["ada"])).json()["status"] == "passed"


def test_selection_filters_busy_submissions_and_empty_selections(client, db_session) -> None:
    ids, tokens = _setup(client, db_session)
    ada_id = client.get("/api/v1/me", headers=bearer(tokens["ada"])).json()["id"]
    first = _regrade(client, tokens["ta"], student_id=ada_id).json()
    assert {r["submission_id"] for r in first["rows"]} == {ids["ada_pass"], ids["ada_fail"]}
    # Submissions in an undecided batch are left out of another one, and said so.
    second = _regrade(client, tokens["ta"]).json()
    assert [r["submission_id"] for r in second["rows"]] == [ids["bob_pass"]]
    assert second["left_out_busy"] == 2
    empty = _regrade(client, tokens["ta"], grader_version="no-such-version")
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "regrade_empty"
    unknown = _regrade(client, tokens["ta"], assignment="nope")
    assert unknown.json()["error"]["code"] == "unknown_assignment"
    listed = client.get("/api/v1/regrades", headers=bearer(tokens["ta"])).json()["regrades"]
    assert [b["id"] for b in listed] == [second["id"], first["id"]]
    # A queued (unfinished) submission is never selected.
    upload(client, tokens["bob"], kernel_source())
    third = _regrade(client, tokens["ta"], student_id=None)
    assert third.status_code == 422 and third.json()["error"]["busy"] == 3
