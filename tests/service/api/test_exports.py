"""Exports: the LMS CSV (one row per enrolled student, with no submission, late and
disqualified ones included; score and parts) and Gradescope's results.json."""

from __future__ import annotations

import csv
import datetime as dt
import io

from sqlalchemy import select

from submissions.models import AuditEvent

from ..helpers import (
    Clock,
    bearer,
    configure,
    create_staff,
    create_student,
    instructor_headers,
    make_outcome,
    upload_graded,
)

DUE = dt.datetime(2026, 12, 15, 23, 59, tzinfo=dt.UTC)


def _lms(client, token=None) -> list[dict[str, str]]:
    response = client.get("/api/v1/assignments/softmax_backward/export/lms",
                          headers=bearer(token) if token else instructor_headers())
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.text)))


def test_lms_csv_has_a_row_for_every_student(client, db_session) -> None:
    configure(client, due_at=DUE, correctness_points=80,
              speed_points=[{"min_speedup": 1.0, "points": 5}, {"min_speedup": 2.0, "points": 20}])
    clock = Clock(client, DUE - dt.timedelta(days=1))
    ada = client.post("/api/v1/students", json={"name": "ada", "email": "ada@example.edu",
                                                "external_id": "s1"}, headers=instructor_headers())
    tokens = {"ada": ada.json()["token"]}
    for name in ("bob", "cy", "dee", "eve"):
        tokens[name] = create_student(client, name)[1]

    upload_graded(client, db_session, tokens["ada"], make_outcome(speedup=2.4))  # ada: ranked, 80 + 20
    upload_graded(client, db_session, tokens["bob"], make_outcome("failed"))  # bob: no passing submission
    cy_cheat = upload_graded(client, db_session, tokens["cy"], make_outcome(speedup=9.0))  # cy: disqualified below
    clock.set(DUE + dt.timedelta(hours=1))
    dee_late = upload_graded(client, db_session, tokens["dee"], make_outcome(speedup=1.5))  # dee: late only
    # eve never submits.
    client.post(f"/api/v1/submissions/{cy_cheat}/disqualify", json={"reason": "copied"},
                headers=instructor_headers())

    _, ta = create_staff(client)
    rows = {r["name"]: r for r in _lms(client, ta)}
    assert list(rows) == ["ada", "bob", "cy", "dee", "eve"]
    ada_row = rows["ada"]
    assert (ada_row["email"], ada_row["id"], ada_row["status"], ada_row["rank"]) == (
        "ada@example.edu", "s1", "ranked", "1")
    assert (ada_row["correctness_points"], ada_row["speed_points"], ada_row["score"],
            ada_row["max_score"], ada_row["ranked_speedup"], ada_row["ranking"]) == (
        "80", "20", "100", "100", "2.4", "provisional")
    assert (rows["bob"]["status"], rows["bob"]["score"], rows["bob"]["submissions"]) == (
        "no_passing_submission", "0", "1")
    assert (rows["cy"]["status"], rows["cy"]["score"], rows["cy"]["disqualified_submissions"],
            rows["cy"]["reason"]) == ("unranked", "0", "1", "disqualified: copied")
    dee = rows["dee"]
    assert (dee["status"], dee["score"], dee["late_submissions"], dee["late_score"]) == (
        "unranked", "0", "1", "85")
    assert dee["reason"].startswith("late: ")
    assert dee["late_submission_id"] != ""
    # Eve never submitted: a blank grade (no grade yet), 0 only when staff ask for zeros.
    assert (rows["eve"]["status"], rows["eve"]["submissions"], rows["eve"]["score"],
            rows["eve"]["correctness_points"]) == ("no_submission", "0", "", "")
    response = client.get("/api/v1/assignments/softmax_backward/export/lms?zeros=true", headers=bearer(ta))
    zeros = {r["name"]: r for r in csv.DictReader(io.StringIO(response.text))}
    assert (zeros["eve"]["score"], zeros["bob"]["score"], zeros["ada"]["score"]) == ("0", "0", "100")
    # Rows an LMS cannot match (no e-mail, no roster id: all but Ada) are named in a header.
    warning = response.headers["x-export-warning"]
    ids = {r["name"]: r["student_id"] for r in rows.values()}
    assert warning.startswith("4 student row(s) have no e-mail and no roster id")
    assert f"student ids {ids['bob']}, {ids['cy']}, {ids['dee']}, {ids['eve']};" in warning
    assert [e.details["zeros"] for e in db_session.scalars(
        select(AuditEvent).where(AuditEvent.action == "export.lms"))] == [False, True]

    # Gradescope: the correctness test follows the checks; lateness and disqualification
    # are their own test (issue 38: "failed" beside "1 of 1 checks that ran passed").
    late = {t["name"]: t for t in client.get(f"/api/v1/submissions/{dee_late}/gradescope",
                                             headers=bearer(ta)).json()["tests"]}
    correctness = late["correctness (every check passes)"]
    assert (correctness["status"], correctness["score"]) == ("passed", 0)
    assert correctness["output"].startswith("1 of 1 checks that ran passed; 0 points counted")
    policy = late["on time and not disqualified"]
    assert policy["status"] == "failed" and policy["output"].startswith("late: uploaded after")
    cheat = {t["name"]: t for t in client.get(f"/api/v1/submissions/{cy_cheat}/gradescope",
                                              headers=bearer(ta)).json()["tests"]}
    assert cheat["correctness (every check passes)"]["status"] == "passed"
    assert cheat["on time and not disqualified"] | {"visibility": ""} == {
        "name": "on time and not disqualified", "score": 0, "max_score": 0,
        "status": "failed", "output": "disqualified: copied", "visibility": ""}


def test_gradescope_results_json(client, db_session) -> None:
    configure(client, correctness_points=60,
              speed_points=[{"min_speedup": 1.0, "points": 20}, {"min_speedup": 2.0, "points": 40}])
    _, ada = create_student(client, "ada")
    passed = upload_graded(client, db_session, ada, make_outcome(speedup=1.4))
    failed = upload_graded(client, db_session, ada, make_outcome("failed"))

    results = client.get(f"/api/v1/submissions/{passed}/gradescope", headers=bearer(ada)).json()
    assert results["score"] == 80 and results["visibility"] == "visible"
    assert results["execution_time"] == 2 and results["output_format"] == "text"
    tests = {t["name"]: t for t in results["tests"]}
    assert set(tests) == {"correctness (every check passes)", "check autograd_fp32",
                          "on time and not disqualified", "speed (headline speedup)"}
    assert tests["on time and not disqualified"]["status"] == "passed"
    for test in results["tests"]:
        assert set(test) == {"name", "score", "max_score", "status", "output", "visibility"}
    assert (tests["correctness (every check passes)"]["score"],
            tests["correctness (every check passes)"]["max_score"]) == (60, 60)
    assert (tests["speed (headline speedup)"]["score"],
            tests["speed (headline speedup)"]["max_score"]) == (20, 40)
    assert "1.4x" in tests["speed (headline speedup)"]["output"]
    assert tests["check autograd_fp32"] | {"output": ""} == {
        "name": "check autograd_fp32", "score": 0, "max_score": 0, "status": "passed",
        "output": "", "visibility": "visible"}
    assert results["leaderboard"] == [{"name": "speedup", "value": 1.4, "order": "desc"}]
    assert results["extra_data"]["submission_id"] == passed

    failing = client.get(f"/api/v1/submissions/{failed}/gradescope",
                         headers=instructor_headers()).json()
    assert failing["score"] == 0 and failing["leaderboard"] == []
    assert {t["name"]: t["status"] for t in failing["tests"]}["check autograd_fp32"] == "failed"
    # Staff exports are audited; a student reading their own is not.
    events = db_session.scalars(select(AuditEvent).where(
        AuditEvent.action == "export.gradescope")).all()
    assert [e.target_id for e in events] == [str(failed)]
