"""The slip-day display in a real headless Chromium against a real `grader serve`
(conftest.py): a student with two slip days sees them, and how late an upload now would be,
on the upload form; uploads one day late through the form; the report says the lateness to
the second and that one slip day covers it; the form then shows the day spent; staff read
and change the budget on the student's page. axe-core on
each page (no serious or critical violation)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from .conftest import INSTRUCTOR_TOKEN
from .test_browser import assert_accessible, kernel

pytestmark = pytest.mark.slow


def test_a_student_sees_slip_days_before_and_after_a_late_upload(
        pages_factory: Any, server: Any, tmp_path: Any) -> None:
    due = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=20)).replace(microsecond=0)
    server.api("PATCH", "/api/v1/assignments/softmax_backward",
               params={"confirm_past_due": "true"},
               json={"due_at": due.isoformat(), "late_policy": "penalty", "late_percent": 10,
                     "late_unit": "day", "late_cap": 3, "counting": "latest"})
    student_id, token = server.create_student("sam")
    server.api("PUT", f"/api/v1/students/{student_id}/slip-days",
               json={"days": 2, "reason": "two per term"})

    student = pages_factory()
    page = student.page
    student.sign_in(token)
    student.goto("/submit")
    rules = page.locator("#rules-softmax_backward")
    before = rules.locator(".slip-days").inner_text()
    assert before.startswith("2 you could spend here (2 for the term)")
    assert re.search(r"would be 20 h( \d+ s)? late", rules.inner_text())
    assert "10% off per day started" in rules.inner_text()
    assert_accessible(student, "upload-with-slip-days")
    student.shot("upload-with-slip-days")

    source = tmp_path / "softmax_backward.py"
    source.write_text(kernel("verdict=passed"))
    page.set_input_files("#file", str(source))
    page.get_by_role("button", name="Upload and grade").click()
    page.wait_for_url(re.compile(r"/submissions/\d+"))
    submission_id = int(re.search(r"/submissions/(\d+)", page.url).group(1))
    server.wait_final(submission_id, token)
    student.goto(f"/submissions/{submission_id}")
    fact = page.locator("#late-fact").inner_text()
    assert re.fullmatch(r"20 h( \d+ s)? late, covered by 1 slip day", fact), fact
    assert re.search(r"score 100 of 100 \(20 h( \d+ s)? late, covered by 1 slip day\)",
                     page.locator("main").inner_text())
    assert_accessible(student, "report-covered-by-a-slip-day")
    student.shot("report-covered-by-a-slip-day")

    student.goto("/submit")
    after = page.locator("#rules-softmax_backward .slip-days").inner_text()
    assert after.startswith("2 you could spend here (2 for the term; 1 spent on this assignment)")
    assert server.api("GET", "/api/v1/me/slip-days", token) == {
        "student_id": student_id, "budget": 2, "used": 1, "left": 1,
        "spent": [{"assignment": "softmax_backward", "submission_id": submission_id, "days": 1}]}

    # Staff read and change the budget on the student's page (audited).
    staff = pages_factory()
    staff.sign_in(INSTRUCTOR_TOKEN)
    staff.goto(f"/staff/students/{student_id}")
    assert staff.page.locator("#slip-days").inner_text() == (
        f"1 of 2 left; spent 1 on softmax_backward (submission {submission_id})")
    assert_accessible(staff, "staff-student-slip-days")
    staff.page.get_by_label("Slip days for the term").fill("3")
    staff.page.get_by_label("Why (recorded in the audit log)").fill("accommodation")
    staff.page.get_by_role("button", name="Save slip days").click()
    staff.page.wait_for_url(re.compile(r"done=slip_days"))
    assert staff.page.locator("#slip-days").inner_text().startswith("2 of 3 left")
    staff.shot("staff-student-slip-days")
