"""Course policy (docs/course.md, "Points", "Late penalties", "Slip days"): the same graded
submissions give the same points on the report page, the API, `grader status` / `grader
history`, the leaderboard (API and `grader course leaderboard`) and every export (LMS,
Canvas, Moodle, Gradescope one and class) for partial credit per check (default and staff's
points), a late curve (1 hour and 2 days late, 10%/day, 3-day cap), slip days (with an
extension) and a regrade that changes which checks pass."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re

import pytest
from sqlalchemy import select

import client.cli as student_cli
import client.course as course_cli
from submissions.grading import CheckResult
from submissions.models import AuditEvent, SlipDaySpend

from ..helpers import (
    INSTRUCTOR_TOKEN,
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
)
from . import test_extensions
from .test_extensions import _signed_in

#: `grader status|history` and `grader course ...` run in process against the app.
cli = test_extensions.cli

DUE = dt.datetime(2026, 12, 15, 23, 59, tzinfo=dt.UTC)
XENT = "softmax_cross_entropy_backward"
#: The cross-entropy assignment's 16 checks (its points.toml, in order).
XENT_CHECKS = ("example_three_class", "autograd_fp32", "half_precision", "central_difference",
               "row_sum_invariant", "ignore_index", "stability_large_logits", "strided_inputs",
               "output_contract", "rejects_mismatch", "rejects_requires_grad",
               "rejects_out_of_range_targets", "edge_shapes", "fresh_results", "training_step",
               "triton_kernel")


def _partial(passing: int, *, not_run: int = 0):  # noqa: ANN202 - a GradingOutcome
    """A failed grading of the cross-entropy kernel: the first `passing` checks passed, the
    last `not_run` never ran (the run ended early), the others failed."""
    from dataclasses import replace

    checks = [CheckResult(name=name, passed=index < passing,
                          skipped=index >= len(XENT_CHECKS) - not_run,
                          message="ok" if index < passing else "wrong", numbers={})
              for index, name in enumerate(XENT_CHECKS)]
    return replace(make_outcome("failed"), checks=checks)


def _upload_graded(client, db_session, token, outcome, *, function: str = "softmax_backward",
                   assignment: str = "softmax_backward") -> int:
    response = upload(client, token, kernel_source(function=function), assignment=assignment)
    assert response.status_code == 202, response.text
    assert grade_next(db_session, outcome) == response.json()["id"]
    return response.json()["id"]


def _everywhere(client, cli, page, tmp_path, *, assignment, submission_id, token,  # noqa: F811
                student_name):
    """The student's grade on `assignment` as each reader writes it: {reader: text}, where
    the text is ``"<points> of <max>"`` for readers that carry numbers only."""
    seen: dict[str, str] = {}
    api = client.get(f"/api/v1/submissions/{submission_id}", headers=bearer(token)).json()
    seen["api"] = api["score"]["text"]
    listed = client.get("/api/v1/submissions", headers=bearer(token)).json()["submissions"]
    seen["api list"] = next(s for s in listed if s["id"] == submission_id)["score"]["text"]
    html = page.get(f"/submissions/{submission_id}").text
    seen["page"] = re.search(r"score <strong>([^<]+)</strong>", html).group(1).replace(
        "&#39;", "'")
    status = cli(student_cli.status, [str(submission_id)], token)
    seen["grader status"] = re.search(r"score: (.+?) \(correctness", status).group(1)
    history = cli(student_cli.history, [], token)
    seen["grader history"] = api["score"]["text"] if api["score"]["text"] in history else history

    board = client.get(f"/api/v1/leaderboard?assignment={assignment}",
                       headers=instructor_headers()).json()["rows"]
    row = next(r for r in board if r["student_name"] == student_name)
    seen["leaderboard"] = row["score"]["text"]
    course_board = cli(course_cli.main, ["leaderboard", assignment], INSTRUCTOR_TOKEN)
    seen["grader course leaderboard"] = (api["score"]["text"] if api["score"]["text"]
                                         in course_board else course_board)

    lms_file = tmp_path / "grades.csv"
    cli(course_cli.main, ["export-lms", assignment, "--output", str(lms_file)], INSTRUCTOR_TOKEN)
    [lms] = [r for r in csv.DictReader(io.StringIO(lms_file.read_text()))
             if r["name"] == student_name]
    seen["lms export"] = lms["grade"]
    seen["lms export numbers"] = f"{lms['score']} of {lms['max_score']}"
    canvas_file, moodle_file = tmp_path / "canvas.csv", tmp_path / "moodle.csv"
    cli(course_cli.main, ["export-canvas", "--output", str(canvas_file)], INSTRUCTOR_TOKEN)
    canvas = list(csv.DictReader(io.StringIO(canvas_file.read_text())))
    [canvas_row] = [r for r in canvas if r["Student"] == student_name]
    seen["canvas export"] = f"{canvas_row[assignment]} of {canvas[0][assignment]}"
    cli(course_cli.main, ["export-moodle", "--output", str(moodle_file)], INSTRUCTOR_TOKEN)
    [moodle] = [r for r in csv.DictReader(io.StringIO(moodle_file.read_text()))
                if r["Full name"] == student_name]
    seen["moodle export"] = moodle[f"Feedback: {assignment}"].split("; ")[0]
    class_file = tmp_path / "class.json"
    cli(course_cli.main, ["gradescope-class", assignment, "--output", str(class_file)],
        INSTRUCTOR_TOKEN)
    [entry] = [e for e in json.loads(class_file.read_text())["students"]
               if e["name"] == student_name]
    seen["gradescope class export"] = f"{entry['results']['score']:g} of {canvas[0][assignment]}"
    gradescope = client.get(f"/api/v1/submissions/{submission_id}/gradescope",
                            headers=instructor_headers()).json()
    seen["gradescope"] = f"{gradescope['score']:g} of {canvas[0][assignment]}"
    return seen


def _expect(seen: dict[str, str], text: str) -> None:
    numbers = text.split(" (")[0]
    expected = {reader: numbers if reader in ("lms export numbers", "canvas export",
                                              "gradescope class export", "gradescope")
                else text for reader in seen}
    assert seen == expected


def test_partial_credit_per_check_with_default_and_staff_points(client, db_session, cli,
                                                                tmp_path) -> None:
    _, ada = create_student(client, "ada")
    # 6 of 16 checks pass, 6 fail, 4 never ran (the run ended early).
    submission = _upload_graded(client, db_session, ada, _partial(6, not_run=4),
                                function=XENT, assignment=XENT)
    page = _signed_in(client, ada)
    kwargs = dict(assignment=XENT, submission_id=submission, token=ada, student_name="ada")
    # The folder's points: 4 + 14 + 8 + 6 + 5 + 8 of the first six checks.
    _expect(_everywhere(client, cli, page, tmp_path, **kwargs), "45 of 100")
    read = client.get(f"/api/v1/submissions/{submission}", headers=bearer(ada)).json()
    credits = {c["name"]: c for c in read["score"]["checks"]}
    assert credits["autograd_fp32"] == {"name": "autograd_fp32", "points": 14.0,
                                        "earned": 14.0, "state": "passed"}
    assert credits["stability_large_logits"]["state"] == "failed"
    assert credits["triton_kernel"] == {"name": "triton_kernel", "points": 12.0, "earned": 0.0,
                                        "state": "not_run"}
    html = page.get(f"/submissions/{submission}").text
    assert "triton_kernel: 0 of 12 (did not run: earns nothing)" in html

    # Staff's points: 2 per check, autograd_fp32 5; correctness becomes their sum (35).
    staff_points = {name: 2.0 for name in XENT_CHECKS} | {"autograd_fp32": 5.0}
    shown = cli(course_cli.main, ["set", XENT, "--check-points",
                                  ",".join(f"{k}:{v:g}" for k, v in staff_points.items())],
                INSTRUCTOR_TOKEN)
    assert "max 35" in shown and "check points (staff's)" in shown
    _expect(_everywhere(client, cli, page, tmp_path, **kwargs), "15 of 35")
    # Back to the folder's points from the settings page's empty field ... via the API.
    configure(client, XENT, check_points=None, correctness_points=100)
    _expect(_everywhere(client, cli, page, tmp_path, **kwargs), "45 of 100")
    # A list that leaves a check out is refused, naming it.
    refused = client.patch(f"/api/v1/assignments/{XENT}", headers=instructor_headers(),
                           json={"check_points": {"autograd_fp32": 5}})
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "assignment_settings_invalid"
    assert "missing: example_three_class" in refused.json()["error"]["message"]


def test_late_curve_one_hour_and_two_days_late(client, db_session, cli, tmp_path) -> None:
    clock = Clock(client, DUE - dt.timedelta(days=3))
    configure(client, due_at=DUE, late_policy="penalty", late_percent=10, late_unit="day",
              late_cap=3, late_after_cap="zero")
    tokens = {name: create_student(client, name)[1] for name in ("ada", "bob", "cy")}
    ids = {}
    for name, late in (("ada", dt.timedelta(hours=1)), ("bob", dt.timedelta(days=2)),
                       ("cy", dt.timedelta(days=3, seconds=12))):
        clock.set(DUE + late)
        ids[name] = _upload_graded(client, db_session, tokens[name], make_outcome())
    for name, text in (("ada", "90 of 100 (100 before a 10% late penalty, 1 h late)"),
                       ("bob", "80 of 100 (100 before a 20% late penalty, 2 days late)"),
                       ("cy", "0 of 100 (100 before the late penalty, 3 days 12 s late, "
                              "past the 3-day cap)")):
        page = _signed_in(client, tokens[name])
        _expect(_everywhere(client, cli, page, tmp_path, assignment="softmax_backward",
                            submission_id=ids[name], token=tokens[name], student_name=name),
                text)
    lms = list(csv.DictReader(io.StringIO(client.get(
        "/api/v1/assignments/softmax_backward/export/lms",
        headers=instructor_headers()).text)))
    bob = next(r for r in lms if r["name"] == "bob")
    assert (bob["late_by"], bob["late_by_s"], bob["late_penalty_percent"]) == (
        "2 days", "172800", "20")
    # Past the cap with "refuse": the upload is refused, saying how late it would be.
    configure(client, late_after_cap="refuse")
    refused = upload(client, tokens["ada"], kernel_source())
    assert refused.status_code == 403 and "3 days 12 s late" in refused.json()["error"]["message"]
    # Under mark_late the grade is 0 and the lateness still written to the second.
    configure(client, late_policy="mark_late")
    moodle = list(csv.DictReader(io.StringIO(client.get(
        "/api/v1/assignments/export/moodle", headers=instructor_headers()).text)))
    feedback = next(r for r in moodle if r["Full name"] == "ada")["Feedback: softmax_backward"]
    assert feedback.startswith("0 of 100 (100 before the late policy); 1 h late; late:")


def test_slip_days_with_an_extension_and_their_budget(client, db_session, cli, tmp_path) -> None:
    clock = Clock(client, DUE - dt.timedelta(days=3))
    configure(client, due_at=DUE, late_policy="penalty", late_percent=10, late_unit="day",
              late_cap=3, counting="latest")
    ada_id, ada = create_student(client, "ada")
    bob_id, bob = create_student(client, "bob")
    _, ta = create_staff(client, "grace", "ta")
    for student_id in (ada_id, bob_id):
        body = {"days": 2, "reason": "course policy: 2 per term"}
        assert client.put(f"/api/v1/students/{student_id}/slip-days", json=body,
                          headers=bearer(ta)).status_code == 403  # instructors only
        assert client.put(f"/api/v1/students/{student_id}/slip-days", json=body,
                          headers=instructor_headers()).json()["left"] == 2
    # ada has a one-day extension and uploads 5 h after it: one slip day covers it.
    client.put(f"/api/v1/assignments/softmax_backward/extensions/{ada_id}",
               json={"extra_days": 1, "reason": "accommodation"}, headers=instructor_headers())
    clock.set(DUE + dt.timedelta(days=1, hours=5))
    before = client.get("/api/v1/assignments/softmax_backward", headers=bearer(ada)).json()["you"]
    assert (before["slip_days_left"], before["slip_days_spent"], before["late_now"]) == (
        2, 0, "5 h late")
    created = upload(client, ada, kernel_source()).json()
    assert (created["late"], created["late_text"], created["slip_days_spent"],
            created["slip_days_left"]) == (False, "5 h late", 1, 1)
    grade_next(db_session, make_outcome())
    page = _signed_in(client, ada)
    _expect(_everywhere(client, cli, page, tmp_path, assignment="softmax_backward",
                        submission_id=created["id"], token=ada, student_name="ada"),
            "100 of 100 (5 h late, covered by 1 slip day)")
    # bob uploads 3 days 2 h late: his 2 slip days cover 2 days; 1 day 2 h stays: 20% off.
    clock.set(DUE + dt.timedelta(days=3, hours=2))
    bob_sub = upload(client, bob, kernel_source()).json()["id"]
    grade_next(db_session, make_outcome())
    page = _signed_in(client, bob)
    _expect(_everywhere(client, cli, page, tmp_path, assignment="softmax_backward",
                        submission_id=bob_sub, token=bob, student_name="bob"),
            "80 of 100 (100 before a 20% late penalty, 3 days 2 h late)")
    # Staff take one day back (audited); the spend is derived again: 1 day, 30% off.
    shown = cli(course_cli.main, ["slip-days", str(bob_id), "--set", "1", "--reason",
                                  "typo in the roster"], INSTRUCTOR_TOKEN)
    assert "0 of 1 slip day(s) left; spent 1 on softmax_backward" in shown
    _expect(_everywhere(client, cli, page, tmp_path, assignment="softmax_backward",
                        submission_id=bob_sub, token=bob, student_name="bob"),
            "70 of 100 (100 before a 30% late penalty, 3 days 2 h late)")
    events = db_session.scalars(select(AuditEvent).where(
        AuditEvent.action == "student.slip_days", AuditEvent.target_id == str(bob_id))
        .order_by(AuditEvent.id)).all()
    assert [(e.details["before"], e.details["after"], e.details["reason"]) for e in events] == [
        (0, 2, "course policy: 2 per term"), (2, 1, "typo in the roster")]
    # A due-date move re-derives what is spent: due 2 days later, ada needs none.
    configure(client, due_at=DUE + dt.timedelta(days=2), confirm_past_due=True)
    mine = client.get("/api/v1/me/slip-days", headers=bearer(ada)).json()
    assert (mine["budget"], mine["used"], mine["left"], mine["spent"]) == (2, 0, 2, [])


def test_a_regrade_that_changes_which_checks_pass(client, db_session, cli, tmp_path) -> None:
    _, ada = create_student(client, "ada")
    _, ta = create_staff(client, "grace", "ta")
    submission = _upload_graded(client, db_session, ada, _partial(6), function=XENT,
                                assignment=XENT)
    page = _signed_in(client, ada)
    kwargs = dict(assignment=XENT, submission_id=submission, token=ada, student_name="ada")
    _expect(_everywhere(client, cli, page, tmp_path, **kwargs), "45 of 100")
    batch = client.post("/api/v1/regrades", json={"assignment": XENT},
                        headers=bearer(ta)).json()
    grade_next(db_session, _partial(9))  # + stability 8, strided 6, output_contract 5
    preview = client.get(f"/api/v1/regrades/{batch['id']}", headers=bearer(ta)).json()
    [row] = preview["rows"]
    assert (row["before"]["score"]["total"], row["after"]["score"]["total"],
            row["score_delta"]) == (45, 64, 19)
    shown = cli(course_cli.main, ["regrade-show", str(batch["id"])], INSTRUCTOR_TOKEN)
    assert "+19" in shown
    _expect(_everywhere(client, cli, page, tmp_path, **kwargs), "45 of 100")  # not applied yet
    client.post(f"/api/v1/regrades/{batch['id']}/apply", headers=bearer(ta))
    _expect(_everywhere(client, cli, page, tmp_path, **kwargs), "64 of 100")


def test_best_or_latest_submission_counts(client, db_session) -> None:
    _, ada = create_student(client, "ada")
    _upload_graded(client, db_session, ada, _partial(9), function=XENT, assignment=XENT)
    latest = _upload_graded(client, db_session, ada, _partial(6), function=XENT, assignment=XENT)

    def graded() -> tuple[int, float]:
        [row] = client.get(f"/api/v1/leaderboard?assignment={XENT}",
                           headers=instructor_headers()).json()["rows"]
        return row["graded_submission_id"], row["score"]["total"]

    assert graded() == (latest - 1, 64)
    configure(client, XENT, counting="latest")
    assert graded() == (latest, 45)


@pytest.mark.parametrize("late", [dt.timedelta(seconds=1), dt.timedelta(hours=24)])
def test_a_slip_day_covers_up_to_24_hours(client, db_session, late) -> None:
    clock = Clock(client, DUE + late)
    configure(client, due_at=DUE, confirm_past_due=True, counting="latest")
    student_id, ada = create_student(client, "ada")
    client.put(f"/api/v1/students/{student_id}/slip-days", json={"days": 1, "reason": "term"},
               headers=instructor_headers())
    _upload_graded(client, db_session, ada, make_outcome())
    [spend] = db_session.scalars(select(SlipDaySpend))
    assert spend.days == 1
    clock.set(DUE + late + dt.timedelta(seconds=1))
    assert client.get("/api/v1/assignments/softmax_backward", headers=bearer(ada)).json()[
        "you"]["slip_days_left"] == 1  # the one already spent here could move to a new upload


def test_the_settings_page_sets_the_curve_the_counting_and_the_check_points(client) -> None:
    page = _signed_in(client, INSTRUCTOR_TOKEN)
    form_page = page.get(f"/staff/assignments/{XENT}").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form_page).group(1)
    assert "autograd_fp32 14" in form_page  # the folder's points, shown beside the field
    form = {"csrf_token": csrf, "opens_at": "", "due_at": "", "late_policy": "penalty",
            "max_submissions": "", "rate_limit_submissions": "", "rate_limit_window_s": "",
            "leaderboard_visible": "on", "correctness_points": "100", "speed_points": "",
            "late_percent": "10", "late_unit": "day", "late_cap": "3",
            "late_after_cap": "refuse", "counting": "latest",
            "check_points": ", ".join(f"{name}:{3 if name == 'triton_kernel' else 1}"
                                      for name in XENT_CHECKS)}
    response = page.post(f"/staff/assignments/{XENT}", data=form, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"].endswith("done=saved")
    api = client.get(f"/api/v1/assignments/{XENT}", headers=instructor_headers()).json()
    assert api["late_policy"] == "penalty" and api["late_curve"] == {
        "percent": 10.0, "unit": "day", "cap": 3.0, "after_cap": "refuse"}
    assert api["points"]["counting"] == "latest" and api["points"]["max_points"] == 18
    assert api["points"]["check_points_overridden"] is True
    # The form as the page now fills it (correctness 18, their sum) changes nothing; the
    # empty field returns to the folder's points.
    assert 'name="correctness_points" type="number" min="0" step="any" value="18"' in page.get(
        f"/staff/assignments/{XENT}").text
    again = page.post(f"/staff/assignments/{XENT}", data={**form, "correctness_points": "18"},
                      follow_redirects=False)
    assert again.headers["location"].endswith("done=unchanged")
    page.post(f"/staff/assignments/{XENT}",
              data={**form, "check_points": "", "correctness_points": "100"})
    api = client.get(f"/api/v1/assignments/{XENT}", headers=instructor_headers()).json()
    assert api["points"]["check_points_overridden"] is False
    assert api["points"]["max_points"] == 100


def test_a_regrade_re_derives_the_slip_days_spent(client, db_session) -> None:
    """A late pass spends a slip day; a regrade that fails every check of it leaves nothing
    to gain, so the day comes back."""
    clock = Clock(client, DUE + dt.timedelta(hours=3))
    configure(client, XENT, due_at=DUE, confirm_past_due=True, late_policy="penalty",
              late_percent=10, late_unit="day")
    student_id, ada = create_student(client, "ada")
    _, ta = create_staff(client, "grace", "ta")
    client.put(f"/api/v1/students/{student_id}/slip-days", json={"days": 1, "reason": "term"},
               headers=instructor_headers())
    submission = _upload_graded(client, db_session, ada, _partial(6), function=XENT,
                                assignment=XENT)
    # The grading was stored by the test, not a worker: derive as the worker does.
    from submissions import slip_days
    slip_days.rederive(db_session, student_id=student_id, now=clock.now)
    read = client.get(f"/api/v1/submissions/{submission}", headers=bearer(ada)).json()
    assert read["score"]["text"] == "45 of 100 (3 h late, covered by 1 slip day)"
    batch = client.post("/api/v1/regrades", json={"assignment": XENT}, headers=bearer(ta)).json()
    grade_next(db_session, _partial(0))
    client.post(f"/api/v1/regrades/{batch['id']}/apply", headers=bearer(ta))
    mine = client.get("/api/v1/me/slip-days", headers=bearer(ada)).json()
    assert (mine["used"], mine["left"]) == (0, 1)
    read = client.get(f"/api/v1/submissions/{submission}", headers=bearer(ada)).json()
    assert read["score"]["text"] == "0 of 100 (0 before a 10% late penalty, 3 h late)"


def test_staff_set_a_students_slip_days_on_their_page(client) -> None:
    student_id, _ = create_student(client, "ada")
    page = _signed_in(client, INSTRUCTOR_TOKEN)
    html = page.get(f"/staff/students/{student_id}").text
    assert '<dd id="slip-days">0 of 0 left</dd>' in html
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)
    refused = page.post(f"/staff/students/{student_id}/slip-days",
                        data={"csrf_token": csrf, "days": "3", "reason": " "})
    assert refused.status_code == 422 and "slip_days_invalid" in refused.text
    saved = page.post(f"/staff/students/{student_id}/slip-days",
                      data={"csrf_token": csrf, "days": "3", "reason": "accommodation"})
    assert saved.status_code == 200 and '<dd id="slip-days">3 of 3 left</dd>' in saved.text
    assert client.get(f"/api/v1/students/{student_id}/slip-days",
                      headers=instructor_headers()).json()["budget"] == 3


def test_slip_days_open_an_assignment_that_refuses_late_uploads(client, db_session) -> None:
    Clock(client, DUE + dt.timedelta(hours=30))
    # counting latest: the days are spent at upload (best: once its verdict is stored).
    configure(client, due_at=DUE, confirm_past_due=True, late_policy="refuse", counting="latest")
    student_id, ada = create_student(client, "ada")
    _, bob = create_student(client, "bob")
    client.put(f"/api/v1/students/{student_id}/slip-days", json={"days": 2, "reason": "term"},
               headers=instructor_headers())
    mine = client.get("/api/v1/assignments/softmax_backward", headers=bearer(ada)).json()
    theirs = client.get("/api/v1/assignments/softmax_backward", headers=bearer(bob)).json()
    assert (mine["is_open"], theirs["is_open"]) == (True, False)
    assert upload(client, bob, kernel_source()).json()["error"]["code"] == "assignment_closed"
    created = upload(client, ada, kernel_source()).json()
    assert (created["late"], created["late_text"], created["slip_days_spent"]) == (
        False, "1 day 6 h late", 2)
