"""The final ranking run: after the due date, each student's best passing on-time submission
is re-graded on a fresh secret seed; the ranked number is that run's; a submission that fails
there loses its rank with the reason shown; the seed never reaches a student."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pytest
from sqlalchemy import select

from submissions.models import AuditEvent, Grading

from ..helpers import (
    Clock,
    bearer,
    configure,
    create_staff,
    create_student,
    grade_next,
    instructor_headers,
    make_outcome,
    upload_graded,
)

DUE = dt.datetime(2026, 12, 15, 23, 59, tzinfo=dt.UTC)
FINAL_RUN = "/api/v1/assignments/softmax_backward/final-run"


def _course(client, db_session):
    """ada 2.0x and bob 1.5x on time (ada also an older 1.1x), cy passes only late, dee
    fails; the clock stands an hour after the due date."""
    configure(client, due_at=DUE, correctness_points=50,
              speed_points=[{"min_speedup": 1.0, "points": 10}, {"min_speedup": 1.4, "points": 30},
                            {"min_speedup": 1.8, "points": 50}])
    clock = Clock(client, DUE - dt.timedelta(days=2))
    tokens = {name: create_student(client, name)[1] for name in ("ada", "bob", "cy", "dee")}
    ids = {}
    for label, name, outcome in (("ada_old", "ada", make_outcome(speedup=1.1)),
                                 ("ada", "ada", make_outcome(speedup=2.0)),
                                 ("bob", "bob", make_outcome(speedup=1.5)),
                                 ("dee", "dee", make_outcome("failed"))):
        ids[label] = upload_graded(client, db_session, tokens[name], outcome)
    clock.set(DUE + dt.timedelta(minutes=5))
    ids["cy"] = upload_graded(client, db_session, tokens["cy"], make_outcome(speedup=5.0))
    clock.set(DUE + dt.timedelta(hours=1))
    return clock, tokens, ids


def _student_views(client, token: str, submission_ids: list[int]) -> list[str]:
    """Every answer a student can read about their work and the course."""
    paths = ["/api/v1/me", "/api/v1/assignments", "/api/v1/assignments/softmax_backward",
             "/api/v1/submissions", "/api/v1/leaderboard"]
    for submission_id in submission_ids:
        paths += [f"/api/v1/submissions/{submission_id}{suffix}"
                  for suffix in ("", "/gradings", "/gradescope", "/source")]
    bodies = []
    for path in paths:
        response = client.get(path, headers=bearer(token))
        assert response.status_code == 200, (path, response.text)
        bodies.append(response.text)
    return bodies


def test_final_run_ranks_on_a_secret_seed_and_failures_lose_their_rank(client, db_session) -> None:
    _clock, tokens, ids = _course(client, db_session)
    provisional = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()
    assert provisional["phase"] == "provisional"
    assert [r["submission_id"] for r in provisional["rows"] if r["rank"]] == [ids["ada"], ids["bob"]]
    assert [(r["student_name"], r["reason"].split(":")[0]) for r in provisional["rows"]
            if not r["rank"]] == [("dee", "no passing submission"), ("cy", "late")]

    _, ta = create_staff(client, "grace", "ta")
    refused = client.post(FINAL_RUN, headers=bearer(ta))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "instructor_required"
    started = client.post(FINAL_RUN, headers=instructor_headers())
    assert started.status_code == 202, started.text
    run = started.json()
    seed = run["seed"]
    assert seed > 0 and run["students"] == 2 and run["pending"] == 2
    assert [r["submission_id"] for r in run["rows"]] == [ids["ada"], ids["bob"]]  # best on time
    gradings = db_session.scalars(select(Grading).where(Grading.purpose == "final")).all()
    assert {g.seed for g in gradings} == {seed} and not any(g.is_current for g in gradings)

    # While it runs, the board stays provisional (never "final" over pending rows) and says
    # how far the run is.
    ada_view = client.get("/api/v1/leaderboard", headers=bearer(tokens["ada"])).json()
    assert ada_view["phase"] == "provisional" and ada_view["final_run_id"] is None
    assert ada_view["final_run_running"] == {"id": run["id"], "graded": 0, "total": 2}
    assert [r["rank"] for r in ada_view["rows"]] == [1, 2]
    again = client.post(FINAL_RUN, headers=instructor_headers())
    assert again.status_code == 409 and again.json()["error"]["code"] == "final_run_in_progress"

    # The workers re-grade: ada's kernel fails on the new inputs, bob's passes (slower).
    grade_next(db_session, make_outcome("failed", seed=seed))
    half = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()
    assert half["phase"] == "provisional" and half["final_run_running"]["graded"] == 1
    brief = client.get("/api/v1/assignments/softmax_backward",
                       headers=instructor_headers()).json()["final_run"]
    assert (brief["id"], brief["finished"], brief["graded"], brief["total"]) == (
        run["id"], False, 1, 2)
    grade_next(db_session, make_outcome(speedup=1.2, seed=seed))

    board = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()
    assert board["phase"] == "final" and board["final_run_id"] == run["id"]
    assert board["final_run_running"] is None
    assert [(r["rank"], r["student_name"], r["headline_speedup"]) for r in board["rows"]] == [
        (1, "bob", 1.2), (None, "ada", None), (None, "dee", None), (None, "cy", None)]
    assert board["rows"][1]["reason"] == "failed in the final ranking run: a check failed"
    # Scores: bob's speed points come from the final run (1.2x -> 10), ada keeps her
    # correctness points and loses the speed ones.
    assert board["rows"][0]["score"]["total"] == 60 and board["rows"][1]["score"]["total"] == 50

    ada_board = client.get("/api/v1/leaderboard", headers=bearer(tokens["ada"])).json()["rows"]
    mine = next(r for r in ada_board if r["is_you"])
    assert mine["rank"] is None and mine["reason"].startswith("failed in the final ranking run")
    other = next(r for r in ada_board if not r["is_you"])
    assert other["student_name"] is None and other["submitted_at"] is None and other["rank"] == 1

    history = client.get(f"/api/v1/submissions/{ids['ada']}/gradings",
                         headers=bearer(tokens["ada"])).json()["gradings"]
    assert [(g["purpose"], g["status"]) for g in history] == [
        ("submission", "passed"), ("final", "failed")]
    assert history[1]["final_run_id"] == run["id"] and history[1]["seed"] is None

    # The secret seed is in no answer a student can read, and in the staff's.
    for name in ("ada", "bob", "cy", "dee"):
        own = [s["id"] for s in client.get("/api/v1/submissions",
                                           headers=bearer(tokens[name])).json()["submissions"]]
        for body in _student_views(client, tokens[name], own):
            assert str(seed) not in body
    assert str(seed) in client.get(FINAL_RUN, headers=bearer(ta)).text
    staff_history = client.get(f"/api/v1/submissions/{ids['ada']}/gradings",
                               headers=bearer(ta)).json()["gradings"]
    assert staff_history[1]["seed"] == seed

    lms = {r["name"]: r for r in csv.DictReader(io.StringIO(client.get(
        "/api/v1/assignments/softmax_backward/export/lms", headers=bearer(ta)).text))}
    assert (lms["bob"]["status"], lms["bob"]["rank"], lms["bob"]["score"], lms["bob"]["ranking"]) == (
        "ranked", "1", "60", "final")
    assert (lms["ada"]["status"], lms["ada"]["score"], lms["ada"]["speed_points"]) == (
        "unranked", "50", "0")
    assert lms["ada"]["reason"].startswith("failed in the final ranking run")
    assert (lms["cy"]["status"], lms["cy"]["score"], lms["cy"]["late_score"]) == (
        "unranked", "0", "100")
    assert lms["cy"]["reason"].startswith("late")

    [event] = db_session.scalars(select(AuditEvent).where(AuditEvent.action == "final_run.create"))
    assert event.details["students"] == 2 and str(seed) not in str(event.details)

    # A new run supersedes the previous one, with a fresh seed, once it has finished: until
    # then the board stays the previous run's.
    rerun = client.post(FINAL_RUN, headers=instructor_headers()).json()
    assert rerun["id"] != run["id"] and rerun["seed"] != seed
    assert [r["submission_id"] for r in rerun["rows"]] == [ids["ada"], ids["bob"]]
    meanwhile = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()
    assert (meanwhile["phase"], meanwhile["final_run_id"]) == ("final", run["id"])
    assert meanwhile["final_run_running"]["id"] == rerun["id"]


def test_a_disqualified_submission_leaves_the_final_ranking(client, db_session) -> None:
    _clock, tokens, ids = _course(client, db_session)
    seed = client.post(FINAL_RUN, headers=instructor_headers()).json()["seed"]
    grade_next(db_session, make_outcome(speedup=2.1, seed=seed))
    grade_next(db_session, make_outcome(speedup=1.6, seed=seed))
    client.post(f"/api/v1/submissions/{ids['ada']}/disqualify", json={"reason": "copied"},
                headers=instructor_headers())
    rows = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()["rows"]
    assert [(r["rank"], r["student_name"]) for r in rows if r["rank"]] == [(1, "bob")]
    ada = next(r for r in rows if r["student_name"] == "ada")
    assert ada["reason"] == "disqualified: copied"
    # Her best submission that was not disqualified counts (counting "best"): the older
    # 1.1x pass, whose speed points the final run (which did not time it) does not give.
    assert ada["score"]["text"] == "50 of 100"
    assert ada["graded_submission_id"] == ids["ada_old"]


@pytest.mark.parametrize("case", ["no_due_date", "before_due_date", "final_run_empty"])
def test_a_final_run_needs_a_past_due_date_and_passing_work(client, db_session, case) -> None:
    clock = Clock(client, DUE - dt.timedelta(seconds=1))
    if case != "no_due_date":
        configure(client, due_at=DUE)
    if case == "final_run_empty":
        clock.set(DUE + dt.timedelta(seconds=1))
        _, token = create_student(client)
        upload_graded(client, db_session, token, make_outcome("failed"))
    if case == "before_due_date":
        clock.set(DUE)  # at the due date is not after it
    response = client.post(FINAL_RUN, headers=instructor_headers())
    assert response.status_code == 409 and response.json()["error"]["code"] == case
    missing = client.get(FINAL_RUN, headers=instructor_headers())
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "final_run_not_found"
