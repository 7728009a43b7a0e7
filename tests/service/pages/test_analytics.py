"""The staff's class analytics (submissions/analytics.py, /staff/analytics and its CSV) on
SQLite and PostgreSQL: each check's pass rate, the checks failed most, the most common hints
with their numbers blanked, both per UTC day of upload; staff only."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import update

from submissions.grading import CheckResult
from submissions.models import Submission

from ..helpers import INSTRUCTOR_TOKEN, create_student, grade_next, kernel_source, make_outcome, upload
from .test_pages import sign_in

DAY_1, DAY_2 = dt.datetime(2026, 11, 3, 23, 30, tzinfo=dt.UTC), dt.datetime(2026, 11, 4, 0, 30, tzinfo=dt.UTC)
SIGN_HINT = "Your output matches y*(sum(y*g) - g): the sign of the subtraction is flipped."


def _half_hint(ulps: float) -> str:
    return f"The error is an offset in each row's dot (up to {ulps / 500:.3g}, {ulps:.2g} ulps of float16 at |dot|)."


def _checks(example: bool, half: str | None, *, half_skipped: bool = False) -> list[CheckResult]:
    """example_two_element, half_precision (with `half` as its hint when it fails), output_contract."""
    return [
        CheckResult(name="example_two_element", passed=example, skipped=False,
                    message="ok" if example else "y=[0.25,0.75], g=[2,-1]: 2 of 2 elements outside tolerance.",
                    numbers={} if example else {"details": {"hint": SIGN_HINT}}),
        CheckResult(name="half_precision", passed=half is None and not half_skipped, skipped=half_skipped,
                    message="ok" if half is None else f"(4, 1000) float16: 12 of 4000 outside. Hint: {half}",
                    numbers={} if half is None else {"details": {"hint": half}}),
        CheckResult(name="output_contract", passed=True, skipped=False, message="ok", numbers={}),
    ]


def _graded(client: TestClient, db_session: Any, token: str, checks: list[CheckResult], when: dt.datetime) -> int:
    assert upload(client, token, kernel_source()).status_code == 202
    failed = any(not c.passed and not c.skipped for c in checks)
    submission_id = grade_next(db_session, dataclasses.replace(make_outcome("failed" if failed else "passed"),
                                                              checks=checks))
    db_session.execute(update(Submission).where(Submission.id == submission_id).values(created_at=when))
    db_session.commit()
    return submission_id


def test_staff_see_each_checks_pass_rate_the_common_hints_and_the_days(client: TestClient, db_session: Any) -> None:
    _, ada = create_student(client, "ada")
    _, bo = create_student(client, "bo")
    _graded(client, db_session, ada, _checks(False, None), DAY_1)  # the sign bug
    _graded(client, db_session, bo, _checks(True, _half_hint(0.79)), DAY_1)
    _graded(client, db_session, ada, _checks(True, _half_hint(0.31)), DAY_2)  # same diagnosis, other numbers
    _graded(client, db_session, bo, _checks(True, None, half_skipped=True), DAY_2)  # counts neither way
    upload(client, ada, kernel_source())  # queued: not in the picture

    assert client.get("/staff/analytics", follow_redirects=False).status_code == 303
    sign_in(client, ada)
    assert client.get("/staff/analytics").status_code == 403  # staff only
    assert client.get("/staff/analytics.csv").status_code == 403
    sign_in(client, INSTRUCTOR_TOKEN)
    page = client.get("/staff/analytics?assignment=softmax_backward")
    assert page.status_code == 200
    assert "4 submissions graded from <strong>2 student(s)</strong>" in page.text
    # half_precision failed on 2 submissions, one of each student's: 2 of 2 students.
    assert "failed by 2 of 3 submissions, from 2 of 2 students" in page.text
    assert 'href="/checks#softmax_backward-half_precision"' in page.text
    assert "(2 of 2; 2 student(s))" in page.text  # half_precision's common hint, across both numbers

    rows = list(csv.DictReader(io.StringIO(client.get("/staff/analytics.csv?assignment=softmax_backward").text)))
    table = {(r["day"], r["check"]): r for r in rows}
    assert {k: (v["graded"], v["passed"], v["pass_rate"]) for k, v in table.items() if k[0] == "all"} == {
        ("all", "example_two_element"): ("4", "3", "0.7500"),
        ("all", "half_precision"): ("3", "1", "0.3333"),
        ("all", "output_contract"): ("4", "4", "1.0000")}
    assert table[("all", "half_precision")]["top_hint_count"] == "2"
    assert (table[("all", "half_precision")]["students"],
            table[("all", "half_precision")]["students_failed"]) == ("2", "2")
    assert (table[("all", "example_two_element")]["students"],
            table[("all", "example_two_element")]["students_failed"]) == ("2", "1")
    assert table[("all", "example_two_element")]["top_hint"] == SIGN_HINT
    # Days are UTC days of upload: 23:30 and 00:30 fall on two days.
    assert table[("2026-11-03", "example_two_element")]["pass_rate"] == "0.5000"
    assert table[("2026-11-04", "half_precision")]["graded"] == "1"
    assert table[("2026-11-04", "half_precision")]["top_hint_count"] == "1"
    assert client.get("/staff/analytics?assignment=nope").status_code == 422
