"""api/routes/assignments.py and the upload rules: dates (edges included), late policy,
submission limit, per-assignment rate limit, leaderboard visibility, points; shown to
students, set by instructors only, audited."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select, update

from grader.manifest import MANIFESTS
from submissions.models import INFRASTRUCTURE_ERROR, AuditEvent, Grading, SubmissionStatus

from ..helpers import (
    Clock,
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

OPENS = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
DUE = dt.datetime(2026, 12, 15, 23, 59, tzinfo=dt.UTC)
TICK = dt.timedelta(microseconds=1)


def test_every_manifest_assignment_is_listed_with_default_settings(client) -> None:
    _, token = create_student(client)
    body = client.get("/api/v1/assignments", headers=bearer(token)).json()
    assert [a["name"] for a in body["assignments"]] == list(MANIFESTS)
    first = body["assignments"][0]
    assert first["opens_at"] is None and first["due_at"] is None and first["is_open"]
    assert first["late_policy"] == "mark_late" and first["max_submissions"] is None
    assert first["leaderboard_visible"] is True
    points = first["points"]
    assert {k: points[k] for k in ("correctness_points", "speed_points", "max_points")} == {
        "correctness_points": 100.0, "speed_points": [], "max_points": 100.0}
    # The folder's points.toml: every check with its points, summing to the correctness points.
    assert points["check_points"][0] == {"name": "example_two_element", "points": 4.0}
    assert sum(c["points"] for c in points["check_points"]) == 100.0
    assert points["counting"] == "best" and points["check_points_overridden"] is False
    assert first["rate_limit_submissions"] == 20 and first["rate_limit_window_s"] == 3600
    assert first["you"] == {"submissions_used": 0, "submissions_left": None, "due_at": None,
                            "extension": False, "slip_days_budget": 0, "slip_days_left": 0,
                            "slip_days_spent": 0, "late_now": None}
    assert first["updated_by"] is None


def test_instructor_sets_dates_and_points_and_the_change_is_audited(client, db_session) -> None:
    body = configure(client, opens_at=OPENS, due_at="2026-12-16T00:59:00+01:00",
                     late_policy="refuse", max_submissions=5, leaderboard_visible=False,
                     correctness_points=60,
                     speed_points=[{"min_speedup": 1.0, "points": 10},
                                   {"min_speedup": 2.0, "points": 40}])
    assert body["due_at"] == "2026-12-15T23:59:00Z"  # stored and shown in UTC
    assert body["points"]["max_points"] == 100.0 and body["late_policy"] == "refuse"
    assert body["updated_by"] == "GRADER_INSTRUCTOR_TOKEN (bootstrap)"
    # Only the fields sent change; null clears a limit.
    body = configure(client, max_submissions=None)
    assert body["max_submissions"] is None and body["late_policy"] == "refuse"
    [first, second] = db_session.scalars(select(AuditEvent).where(
        AuditEvent.action == "assignment.update").order_by(AuditEvent.id)).all()
    assert first.actor_kind == "bootstrap" and first.target_id == "softmax_backward"
    assert first.details["after"]["max_submissions"] == 5
    assert second.details == {"before": {"max_submissions": 5}, "after": {"max_submissions": None}}


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"opens_at": "2026-12-20T00:00:00Z", "due_at": "2026-12-15T00:00:00Z"},
         "assignment_settings_invalid"),
        ({"speed_points": [{"min_speedup": 2.0, "points": 10}, {"min_speedup": 1.5, "points": 20}]},
         "assignment_settings_invalid"),
        ({"speed_points": [{"min_speedup": 1.0, "points": 30}, {"min_speedup": 2.0, "points": 20}]},
         "assignment_settings_invalid"),
        ({"due_at": "2026-12-15T23:59:00"}, "validation_error"),  # no zone
        ({"late_policy": "maybe"}, "validation_error"),
        ({"max_submissions": 0}, "validation_error"),
        ({"correctness_points": None}, "validation_error"),
        ({"deadline": "2026-12-15T23:59:00Z"}, "validation_error"),  # unknown field
    ],
)
def test_inconsistent_settings_are_refused(client, fields, code) -> None:
    response = client.patch("/api/v1/assignments/softmax_backward", json=fields,
                            headers=instructor_headers())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == code


def test_only_instructors_change_settings(client) -> None:
    _, ta = create_staff(client, "grace", "ta")
    _, instructor = create_staff(client, "ian", "instructor")
    _, student = create_student(client)
    for token, expected in ((student, 403), (ta, 403), (instructor, 200)):
        response = client.patch("/api/v1/assignments/softmax_backward", json={"due_at": DUE.isoformat()},
                                headers=bearer(token))
        assert response.status_code == expected, response.text
    assert client.patch("/api/v1/assignments/softmax_backward",
                        json={"due_at": None}, headers=bearer(ta)).json()["error"]["code"] == (
        "instructor_required")
    assert client.patch("/api/v1/assignments/nope", json={},
                        headers=instructor_headers()).json()["error"]["code"] == "unknown_assignment"


def test_opening_edge(client) -> None:
    configure(client, opens_at=OPENS, due_at=DUE)
    clock = Clock(client, OPENS - TICK)
    _, token = create_student(client)
    refused = upload(client, token, kernel_source())
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "assignment_not_open" and error["opens_at"] == "2026-12-01T09:00:00Z"
    assert "2026-12-01T09:00:00Z" in error["message"]
    assignment = client.get("/api/v1/assignments/softmax_backward", headers=bearer(token)).json()
    assert assignment["is_open"] is False
    clock.set(OPENS)  # open from opens_at inclusive
    assert upload(client, token, kernel_source()).status_code == 202


@pytest.mark.parametrize("policy", ["mark_late", "refuse"])
def test_due_edge_and_late_policy(client, db_session, policy) -> None:
    configure(client, due_at=DUE, late_policy=policy)
    clock = Clock(client, DUE)  # exactly at the due date: on time
    _, token = create_student(client)
    on_time = upload(client, token, kernel_source())
    assert on_time.status_code == 202
    assert on_time.json()["late"] is False and on_time.json()["due_at"] == "2026-12-15T23:59:00Z"

    clock.set(DUE + TICK)
    late = upload(client, token, kernel_source())
    if policy == "refuse":
        assert late.status_code == 403
        assert late.json()["error"]["code"] == "assignment_closed"
        assert late.json()["error"]["due_at"] == "2026-12-15T23:59:00Z"
        return
    assert late.status_code == 202 and late.json()["late"] is True
    body = client.get(f"/api/v1/submissions/{late.json()['id']}", headers=bearer(token)).json()
    assert body["late"] is True and body["due_at"] == "2026-12-15T23:59:00Z"
    # A late submission is never ranked, even when it is the student's only passing one.
    grade_next(db_session, make_outcome("failed"))
    grade_next(db_session, make_outcome(speedup=3.0))
    board = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()
    assert [(r["rank"], r["reason"].split(":")[0]) for r in board["rows"]] == [(None, "late")]
    assert board["rows"][0]["score"]["text"] == "0 of 100 (100 before the late policy)"
    listed = client.get("/api/v1/submissions", headers=bearer(token)).json()["submissions"]
    assert [s["late"] for s in listed] == [True, False]


def test_submission_limit_counts_everything_but_infrastructure_errors(client, db_session) -> None:
    configure(client, max_submissions=2)
    _, token = create_student(client)
    first = upload(client, token, kernel_source()).json()
    assert (first["submissions_used"], first["max_submissions"]) == (1, 2)
    assert upload(client, token, kernel_source()).json()["submissions_used"] == 2
    refused = upload(client, token, kernel_source())
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "submission_limit_reached"
    assert (error["max_submissions"], error["used"]) == (2, 2)
    assignment = client.get("/api/v1/assignments/softmax_backward", headers=bearer(token)).json()
    assert assignment["you"] == {"submissions_used": 2, "submissions_left": 0, "due_at": None,
                                 "extension": False, "slip_days_budget": 0, "slip_days_left": 0,
                                 "slip_days_spent": 0, "late_now": None}
    # Our fault does not use up a submission.
    db_session.execute(update(Grading).where(Grading.submission_id == first["id"]).values(
        status=SubmissionStatus.ERROR, error_kind=INFRASTRUCTURE_ERROR))
    db_session.commit()
    assert upload(client, token, kernel_source()).status_code == 202


def test_assignment_rate_limit_overrides_the_service_default(client) -> None:
    body = configure(client, rate_limit_submissions=1, rate_limit_window_s=60)
    assert (body["rate_limit_submissions"], body["rate_limit_window_s"]) == (1, 60)
    clock = Clock(client, DUE)
    _, token = create_student(client)
    assert upload(client, token, kernel_source()).status_code == 202
    clock.set(DUE + dt.timedelta(seconds=30))
    refused = upload(client, token, kernel_source())
    assert refused.status_code == 429 and refused.headers["retry-after"] == "30"
    clock.set(DUE + dt.timedelta(seconds=61))
    assert upload(client, token, kernel_source()).status_code == 202
    body = configure(client, rate_limit_submissions=None, rate_limit_window_s=None)
    assert body["rate_limit_submissions"] == 20  # back to the service's default


def test_hidden_leaderboard_is_refused_to_students_only(client, db_session) -> None:
    _, token = create_student(client)
    upload_graded(client, db_session, token, make_outcome(speedup=1.5))
    assert client.get("/api/v1/leaderboard", headers=bearer(token)).status_code == 200
    configure(client, leaderboard_visible=False)
    hidden = client.get("/api/v1/leaderboard", headers=bearer(token))
    assert hidden.status_code == 403 and hidden.json()["error"]["code"] == "leaderboard_hidden"
    _, ta = create_staff(client)
    assert len(client.get("/api/v1/leaderboard", headers=bearer(ta)).json()["rows"]) == 1


def test_scores_follow_the_points_formula(client, db_session) -> None:
    configure(client, correctness_points=70, speed_points=[
        {"min_speedup": 1.0, "points": 10}, {"min_speedup": 2.0, "points": 30}])
    _, token = create_student(client)
    scores = {}
    for label, outcome in (("cpu", make_outcome(speedup=None)), ("slow", make_outcome(speedup=0.9)),
                           ("ok", make_outcome(speedup=1.0)), ("fast", make_outcome(speedup=2.5)),
                           ("failed", make_outcome("failed"))):
        submission_id = upload_graded(client, db_session, token, outcome)
        scores[label] = client.get(f"/api/v1/submissions/{submission_id}",
                                   headers=bearer(token)).json()["score"]
    assert {k: (v["correctness_points"], v["speed_points"], v["total"]) for k, v in scores.items()} == {
        "cpu": (70, 0, 70), "slow": (70, 0, 70), "ok": (70, 10, 80), "fast": (70, 30, 100),
        "failed": (0, 0, 0)}
    assert {v["max_total"] for v in scores.values()} == {100}
