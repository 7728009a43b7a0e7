"""api/routes/leaderboard.py: best passing submission per student, ranked by the stored
headline speedup; anonymised for students; CSV export."""

from __future__ import annotations

import csv
import dataclasses
import io

from ..helpers import bearer, create_student, grade_next, instructor_headers, kernel_source, make_outcome, upload


def _submit_and_grade(client, db_session, token: str, outcome) -> int:
    submission_id = upload(client, token, kernel_source()).json()["id"]
    assert grade_next(db_session, outcome) == submission_id
    return submission_id


def test_ranking_best_per_student_ties_and_unbenchmarked_rows(client, db_session) -> None:
    students = {name: create_student(client, name) for name in ["ada", "bob", "cy", "dee", "eve"]}
    tok = {name: token for name, (_, token) in students.items()}
    ada_slow = _submit_and_grade(client, db_session, tok["ada"], make_outcome(speedup=1.1))
    bob_best = _submit_and_grade(client, db_session, tok["bob"], make_outcome(speedup=2.0))
    cy_cpu = _submit_and_grade(client, db_session, tok["cy"], make_outcome(speedup=None))
    ada_best = _submit_and_grade(client, db_session, tok["ada"], make_outcome(speedup=2.0))
    _submit_and_grade(client, db_session, tok["bob"], make_outcome(speedup=1.5))
    _submit_and_grade(client, db_session, tok["ada"], make_outcome("failed"))
    _submit_and_grade(client, db_session, tok["dee"], make_outcome("failed"))
    dee_cpu = _submit_and_grade(client, db_session, tok["dee"], make_outcome(speedup=None))
    _submit_and_grade(client, db_session, tok["eve"], make_outcome("error", error_kind="import"))
    upload(client, tok["eve"], kernel_source())  # still queued: not on the board

    board = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()
    rows = [(r["rank"], r["student_name"], r["submission_id"], r["headline_speedup"])
            for r in board["rows"]]
    assert rows[:4] == [
        (1, "bob", bob_best, 2.0),     # tie at 2.0: the same rank (listed by upload time)
        (1, "ada", ada_best, 2.0),     # ada's best, not her earlier 1.1
        (3, "cy", cy_cpu, None),       # passing without a GPU benchmark: tied, after
        (3, "dee", dee_cpu, None),
    ]
    assert ada_slow not in {r[2] for r in rows}
    # Staff see the unranked student too, with the reason.
    assert [(r["rank"], r["student_name"], r["reason"]) for r in board["rows"][4:]] == [
        (None, "eve", "no passing submission")]


def test_a_board_without_benchmarks_ranks_every_pass_first(client, db_session) -> None:
    tokens = {name: create_student(client, name)[1] for name in ["ada", "bob", "cy", "dee"]}
    for name in ("ada", "bob", "cy"):
        _submit_and_grade(client, db_session, tokens[name], make_outcome(speedup=None))
    board = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()
    assert [(r["rank"], r["student_name"], r["reason"]) for r in board["rows"]] == [
        (1, "ada", None), (1, "bob", None), (1, "cy", None), (None, "dee", "no submission")]
    # A student sees the tie, and not the others' unranked rows.
    rows = client.get("/api/v1/leaderboard", headers=bearer(tokens["bob"])).json()["rows"]
    assert [(r["rank"], r["is_you"]) for r in rows] == [(1, False), (1, True), (1, False)]


def test_a_board_ranks_the_timings_of_one_gpu_model(client, db_session) -> None:
    """Two workers of different GPU models: the board ranks the model most rows were timed on
    and lists the other's rows unranked with the reason (their speedups are not comparable)."""
    tokens = {name: create_student(client, name)[1] for name in ["ada", "bob", "cy"]}
    for name, speedup, device in (("ada", 2.0, "NVIDIA H200"), ("bob", 9.0, "NVIDIA A100-SXM4-80GB"),
                                  ("cy", 1.5, "NVIDIA H200")):
        outcome = dataclasses.replace(make_outcome(speedup=speedup), device=device)
        _submit_and_grade(client, db_session, tokens[name], outcome)
    board = client.get("/api/v1/leaderboard", headers=instructor_headers()).json()
    assert [(r["rank"], r["student_name"], r["headline_speedup"]) for r in board["rows"][:2]] == [
        (1, "ada", 2.0), (2, "cy", 1.5)]
    (bob,) = [r for r in board["rows"] if r["student_name"] == "bob"]
    assert bob["rank"] is None and bob["reason"].startswith("timed on NVIDIA A100-SXM4-80GB; this board ranks "
                                                             "timings on NVIDIA H200 only")


def test_students_see_an_anonymised_board_with_their_row_marked(client, db_session) -> None:
    _, ada = create_student(client, "ada")
    _, bob = create_student(client, "bob")
    ada_id = _submit_and_grade(client, db_session, ada, make_outcome(speedup=1.2))
    _submit_and_grade(client, db_session, bob, make_outcome(speedup=3.0))
    rows = client.get("/api/v1/leaderboard", headers=bearer(ada)).json()["rows"]
    assert [r["is_you"] for r in rows] == [False, True]
    assert rows[0]["student_name"] is None and rows[0]["student_id"] is None
    assert rows[0]["submission_id"] is None and rows[0]["headline_speedup"] == 3.0
    assert rows[1]["student_name"] == "ada" and rows[1]["submission_id"] == ada_id


def test_csv_export_for_the_gradebook(client, db_session) -> None:
    _, ada = create_student(client, "ada")
    _submit_and_grade(client, db_session, ada, make_outcome(speedup=1.25))
    response = client.get("/api/v1/leaderboard?format=csv", headers=instructor_headers())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert rows[0]["student_name"] == "ada" and rows[0]["rank"] == "1"
    assert float(rows[0]["headline_speedup"]) == 1.25


def test_leaderboard_needs_a_token_and_a_known_assignment(client) -> None:
    assert client.get("/api/v1/leaderboard").status_code == 401
    response = client.get("/api/v1/leaderboard?assignment=nope", headers=instructor_headers())
    assert response.status_code == 422 and response.json()["error"]["code"] == "unknown_assignment"
