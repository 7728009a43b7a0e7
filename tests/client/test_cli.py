"""client/: rendering a submission as the service returns it (no seed, queued, broken on
our side), and the HTTP client's retries. No server, no database: httpx's mock transport."""

from __future__ import annotations

import datetime as dt
import io

import httpx
import pytest
from rich.console import Console

from api.schemas import SubmissionRead
from client import http
from client.cli import progress_line, render_submission
from client.http import ApiError, ServiceClient

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def _submission(**fields) -> SubmissionRead:
    base = dict(
        id=7, student_id=1, assignment="softmax_backward", status="passed",
        headline_speedup=None, created_at=NOW, finished_at=NOW, late=False, disqualified=False,
        score={"correctness_points": 60, "speed_points": 0, "total": 60, "max_total": 100,
               "earned_total": 60, "text": "60 of 100"},
        student_name="ada", filename="k.py", source_sha256="0" * 64, source_bytes=10,
        checks=[{"name": "autograd_fp32", "passed": True, "skipped": False, "message": "ok",
                 "numbers": {"cases": 5, "max_abs_err": 1e-7, "max_err_over_tolerance": 0.01}}],
        error=None, benchmark=None, device="cpu (Triton interpreter)", versions=None, log=None,
        started_at=NOW, grading_duration_s=3.0, worker_id=None, attempts=1,
        result={"schema": 1, "assignment": "softmax_backward", "verdict": "passed",
                "checks": [{"name": "autograd_fp32", "passed": True, "message": "ok",
                            "cases": 5, "max_abs_err": 1e-7, "max_err_over_tolerance": 0.01}],
                "device": "cpu (Triton interpreter)", "sandbox": "bubblewrap 0.8.0",
                "duration_s": 3.0},
    )
    return SubmissionRead.model_validate({**base, **fields})


def _render(submission: SubmissionRead) -> str:
    buffer = io.StringIO()
    render_submission(Console(file=buffer, width=120), submission)
    return buffer.getvalue()


def test_a_result_without_a_seed_renders_with_grader_checks_table_and_the_score() -> None:
    text = _render(_submission())
    assert "autograd_fp32" in text and "✓" in text and "1/1 checks passed" in text
    assert "seed" not in text
    assert "score: 60 of 100 (correctness 60 + speed 0)" in text


def test_late_and_disqualified_submissions_say_so() -> None:
    text = _render(_submission(
        late=True, due_at=NOW, disqualified=True,
        disqualification={"reason": "copied", "at": NOW},
        score={"correctness_points": 0, "speed_points": 0, "total": 0, "max_total": 100,
               "earned_total": 60, "withheld": "disqualified",
               "text": "0 of 100 (disqualified; 60 before)"}))
    assert "late: uploaded after your due date (2026-12-01 12:00 UTC)" in text
    assert "score: 0 of 100 (disqualified; 60 before)" in text
    assert "disqualified on 2026-12-01 12:00 UTC: copied" in text


def test_queued_and_broken_gradings_render_without_a_result_document() -> None:
    queued = _render(_submission(status="queued", result=None, checks=[], score=None))
    assert "no verdict yet (queued)" in queued
    broken = _render(_submission(
        status="error", result=None, checks=[], score=None,
        error={"kind": "infrastructure", "message": "grading broke on our side"}))
    assert "error (infrastructure)" in broken and "grading broke on our side" in broken


def test_busy_answers_are_retried_and_errors_keep_their_code(monkeypatch) -> None:
    monkeypatch.setattr(http.time, "sleep", lambda _s: None)
    answers = [httpx.Response(503, headers={"Retry-After": "1"}, json={"error": {
        "code": "database_unavailable", "message": "retry"}}),
        httpx.Response(200, json={"ok": True})]
    waits = []
    client = ServiceClient("http://grader.test", "tok", on_retry=lambda why, s: waits.append(why),
                           transport=httpx.MockTransport(lambda request: answers.pop(0)))
    assert client.get_json("/x") == {"ok": True} and len(waits) == 1

    refused = ServiceClient("http://grader.test", "tok", transport=httpx.MockTransport(
        lambda request: httpx.Response(403, json={"error": {
            "code": "assignment_closed", "message": "due", "due_at": "2026-12-15T23:59:00Z"}})))
    with pytest.raises(ApiError) as raised:
        refused.request("POST", "/api/v1/submissions", expect=(202,))
    assert raised.value.code == "assignment_closed" and raised.value.status == 403
    assert raised.value.details == {"due_at": "2026-12-15T23:59:00Z"}


def test_an_upload_is_not_resent_after_the_connection_broke_mid_request(monkeypatch) -> None:
    monkeypatch.setattr(http.time, "sleep", lambda _s: None)
    sent = []

    def broken(request: httpx.Request) -> httpx.Response:
        sent.append(request.method)
        raise httpx.ReadError("connection reset", request=request)

    client = ServiceClient("http://grader.test", "tok", transport=httpx.MockTransport(broken))
    with pytest.raises(ApiError) as raised:
        client.request("POST", "/api/v1/submissions", expect=(202,))
    assert raised.value.code == "unreachable" and sent == ["POST"]


def test_the_wait_shows_the_queue_position_then_the_time_running_and_its_limit() -> None:
    queued = _submission(status="queued", result=None, score=None,
                         progress={"phase": "queued", "queue_position": 3})
    assert progress_line(queued, waited_s=12.4) == "queued (number 3 in the queue) ... 12 s"
    running = _submission(status="running", result=None, score=None,
                          progress={"phase": "running", "elapsed_s": 40.2, "limit_s": 1800})
    assert progress_line(running, waited_s=50) == (
        "running: the checks, then on a GPU the benchmark (attempt 1; 40 s of the 1800 s a whole "
        "grading may take)")
    older_server = _submission(status="running", result=None, score=None)
    assert progress_line(older_server, waited_s=7) == "running (attempt 1) ... 7 s"
    compiling = _submission(status="running", result=None, score=None,
                            progress={"phase": "running", "elapsed_s": 9.6, "limit_s": 1800, "stage": "compiling",
                                      "stage_label": "compiling your kernels", "stage_elapsed_s": 3.0})
    assert progress_line(compiling, waited_s=11) == (
        "running: compiling your kernels (attempt 1; 10 s of the 1800 s a whole grading may take)")


def test_the_wait_asks_for_the_queue_place_at_once_then_long_polls(monkeypatch) -> None:
    """Issue 38: the first read was a 30 s long-poll, so a queued upload showed "waiting for
    a worker..." for 30 s. The first read answers at once with the queue place."""
    from client.cli import wait_for_verdict

    monkeypatch.setattr(http.time, "sleep", lambda _s: None)
    asked: list[str | None] = []
    queued = _submission(status="queued", result=None, score=None, finished_at=None,
                         progress={"phase": "queued", "queue_position": 4})
    done = _submission()

    def server(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params.get("wait"))
        body = queued if len(asked) < 3 else done
        return httpx.Response(200, content=body.model_dump_json())

    shown = []
    console = Console(file=io.StringIO())
    client = ServiceClient("http://grader.test", "tok", transport=httpx.MockTransport(server))
    original = console.status

    def status(text, **kwargs):  # noqa: ANN001, ANN003, ANN202
        shown.append(text)
        live = original(text, **kwargs)
        update = live.update
        live.update = lambda text=None, **k: (shown.append(text), update(text, **k))
        return live

    monkeypatch.setattr(console, "status", status)
    result = wait_for_verdict(client, console, 7, timeout_s=600, poll_interval_s=0)
    assert result is not None and result.status == "passed"
    assert asked == ["0", "30", "30"]
    assert shown[1].startswith("queued (number 4 in the queue)")  # after the first, instant read


def test_a_fetched_failed_report_links_its_first_check_to_the_services_page() -> None:
    import json
    from pathlib import Path

    document = json.loads((Path(__file__).resolve().parents[1] / "service" / "fakes" / "documents"
                           / "flipped_sign.json").read_text())
    buffer = io.StringIO()
    render_submission(Console(file=buffer, width=200), _submission(status="failed", result=document, score=None),
                      "https://grader.example.edu")
    text = buffer.getvalue()
    assert text.splitlines()[1].startswith("failed: fix example_two_element first")
    assert "(see https://grader.example.edu/checks#softmax_backward-example_two_element)" in text
