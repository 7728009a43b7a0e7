"""client/http.py and the CLI's use of it: Retry-After plus full-jitter backoff, which
answers are retried for which requests, the bounded total time, the Idempotency-Key of
`grader submit` and the long-poll of the wait. No server: httpx's mock transport."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from client import cli, http
from client.http import ApiError, ServiceClient, full_jitter_s

QUEUED = {"error": {"code": "overloaded", "message": "busy"}}


class FakeClock:
    """A monotonic clock that moves only when the client sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _client(answers: list[Any], sent: list[httpx.Request], waits: list[float],
            **kwargs: Any) -> ServiceClient:
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.now += seconds

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return ServiceClient("http://grader.test", "tok", transport=httpx.MockTransport(handler),
                         sleep=sleep, clock=clock, **kwargs)


def test_full_jitter_stays_within_its_exponential_bound() -> None:
    for attempt in range(8):
        samples = [full_jitter_s(attempt) for _ in range(200)]
        bound = min(15.0, 0.5 * 2**attempt)
        assert all(0 <= s <= bound for s in samples)
        assert len(set(samples)) > 150  # spread out, not a fixed delay


def test_a_503_waits_its_retry_after_plus_jitter() -> None:
    sent, waits = [], []
    client = _client([httpx.Response(503, headers={"Retry-After": "3"}, json=QUEUED)] * 3
                     + [httpx.Response(200, json={"ok": True})], sent, waits)
    assert client.get_json("/x") == {"ok": True}
    assert len(sent) == 4 and len(waits) == 3
    assert all(3.0 <= w <= 3.0 + min(15.0, 0.5 * 2**i) for i, w in enumerate(waits))


@pytest.mark.parametrize("answer", [
    httpx.Response(502), httpx.Response(504), httpx.ReadTimeout("slow"),
    httpx.RemoteProtocolError("dropped"),
])
def test_idempotent_requests_retry_gateway_errors_and_broken_connections(answer) -> None:
    sent, waits = [], []
    client = _client([answer, httpx.Response(200, json={})], sent, waits)
    assert client.get_json("/x") == {} and len(sent) == 2


@pytest.mark.parametrize("answer", [httpx.Response(502), httpx.ReadTimeout("slow")])
def test_a_post_without_a_key_is_not_resent_once_it_may_have_run(answer) -> None:
    sent, waits = [], []
    client = _client([answer, httpx.Response(202, json={})], sent, waits)
    with pytest.raises(ApiError):
        client.request("POST", "/api/v1/submissions", expect=(202,))
    assert len(sent) == 1 and waits == []


def test_a_post_whose_body_timed_out_is_resent_even_without_a_key() -> None:
    # 408 request_timeout: the server never got the whole body, so it ran nothing.
    sent, waits = [], []
    client = _client([httpx.Response(408, json={"error": {"code": "request_timeout",
                                                           "message": "slow"}}),
                      httpx.Response(202, json={"id": 1})], sent, waits)
    assert client.request("POST", "/api/v1/submissions", expect=(202,)).json() == {"id": 1}
    assert len(sent) == 2 and len(waits) == 1


def test_a_post_with_a_key_is_resent_with_the_same_key() -> None:
    sent, waits = [], []
    client = _client([httpx.ReadTimeout("slow"), httpx.Response(504),
                      httpx.Response(202, json={"id": 1})], sent, waits)
    response = client.request("POST", "/api/v1/submissions", expect=(202,),
                              idempotency_key="key-1", files={"file": ("k.py", b"x")})
    assert response.json() == {"id": 1}
    assert [r.headers["idempotency-key"] for r in sent] == ["key-1"] * 3


def test_retries_end_within_the_bound() -> None:
    sent, waits = [], []
    client = _client([httpx.Response(503, headers={"Retry-After": "10"}, json=QUEUED)] * 5,
                     sent, waits, retry_for_s=25.0)
    with pytest.raises(ApiError) as raised:
        client.get_json("/x")
    assert raised.value.status == 503 and raised.value.code == "overloaded"
    assert 1 <= len(waits) <= 2 and sum(waits) <= 25.0


def test_a_non_retryable_error_is_raised_at_once() -> None:
    sent, waits = [], []
    client = _client([httpx.Response(404, json={"error": {"code": "submission_not_found",
                                                           "message": "no"}})], sent, waits)
    with pytest.raises(ApiError) as raised:
        client.get_json("/x")
    assert raised.value.code == "submission_not_found" and waits == []


def _submission(status: str) -> dict[str, Any]:
    """A SubmissionRead's JSON without a result document."""
    return {"id": 7, "student_id": 1, "assignment": "softmax_backward", "status": status,
            "headline_speedup": None, "created_at": "2026-12-01T12:00:00Z",
            "finished_at": None, "late": False, "disqualified": False, "score": None,
            "student_name": "ada", "filename": "k.py", "source_sha256": "0" * 64,
            "source_bytes": 10, "checks": [], "error": None, "benchmark": None, "device": None,
            "versions": None, "log": None, "started_at": None, "grading_duration_s": None,
            "worker_id": None, "attempts": 1, "result": None}


def test_submit_sends_one_key_reused_on_retries_and_waits_with_long_polls(
        monkeypatch, tmp_path: Path) -> None:
    sent: list[httpx.Request] = []
    answers = [
        httpx.ReadTimeout("slow"),  # the upload's answer was lost: resent with the same key
        httpx.Response(202, json={"id": 7, "status": "queued", "assignment": "softmax_backward",
                                  "late": False, "due_at": None, "submissions_used": 1,
                                  "max_submissions": None}),
        httpx.Response(503, headers={"Retry-After": "1"}, json=QUEUED),
        httpx.Response(200, json=_submission("running")),
        httpx.Response(200, json=_submission("error")),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    real = ServiceClient
    monkeypatch.setattr(cli, "ServiceClient", lambda server, token, **kw: real(
        server, token, transport=httpx.MockTransport(handler), sleep=lambda _s: None, **kw))
    monkeypatch.setattr(cli.time, "sleep", lambda _s: None)
    monkeypatch.setattr(cli, "Console", lambda **kw: Console(file=io.StringIO(), **kw))
    source = tmp_path / "k.py"
    source.write_text("def softmax_backward(y, g):\n    return y\n")
    code = cli.submit([str(source), "--server", "http://grader.test", "--token", "tok"])
    assert code == cli.EXIT_ERROR  # the verdict `error`
    posts = [r for r in sent if r.method == "POST"]
    assert len(posts) == 2 and posts[0].headers["idempotency-key"] == \
        posts[1].headers["idempotency-key"] != ""
    polls = [r for r in sent if r.method == "GET"]
    assert len(polls) == 3
    # The first read answers at once (the queue place from the first second; its 503 is
    # retried as it was sent), then long-polls.
    assert [r.url.params["wait"] for r in polls] == ["0", "0", str(cli.LONG_POLL_S)]
    assert http.IDEMPOTENT_METHODS >= {"GET", "PUT", "DELETE"}


def test_course_add_student_retries_a_lost_answer_with_the_same_key(monkeypatch, capsys) -> None:
    from client import course

    sent: list[httpx.Request] = []
    answers: list[Any] = [
        httpx.ReadTimeout("slow"),
        httpx.Response(201, json={"id": 3, "name": "Ada", "token": "gst_abc", "email": None,
                                  "external_id": "s1"}),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    real = ServiceClient
    monkeypatch.setattr(course, "ServiceClient", lambda server, token, **kw: real(
        server, token, transport=httpx.MockTransport(handler), sleep=lambda _s: None, **kw))
    code = course.main(["--server", "http://grader.test", "--token", "tok", "--json",
                        "add-student", "Ada", "--id", "s1"])
    assert code == course.EXIT_OK
    assert len(sent) == 2 and sent[0].headers["idempotency-key"] == \
        sent[1].headers["idempotency-key"]
    assert '"token": "gst_abc"' in capsys.readouterr().out


def test_a_refused_connection_fails_at_once_and_a_connect_timeout_is_retried() -> None:
    sent, waits = [], []
    client = _client([httpx.ConnectError("[Errno 111] Connection refused")], sent, waits)
    with pytest.raises(ApiError) as raised:
        client.get_json("/x")
    assert raised.value.code == "unreachable" and len(sent) == 1 and waits == []
    assert "is the address right" in raised.value.message
    sent, waits = [], []
    client = _client([httpx.ConnectTimeout("slow"), httpx.Response(200, json={})], sent, waits)
    assert client.request("POST", "/api/v1/submissions").json() == {} and len(sent) == 2
    # Once the server has answered, a refusal is a restart (the wait of `grader submit` goes on).
    sent, waits = [], []
    client = _client([httpx.Response(200, json={}), httpx.ConnectError("refused"),
                      httpx.Response(200, json={"ok": 1})], sent, waits)
    assert client.get_json("/a") == {} and client.get_json("/b") == {"ok": 1} and len(waits) == 1


def test_a_wrong_server_address_fails_in_well_under_a_second() -> None:
    import socket
    import time

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    with ServiceClient(f"http://127.0.0.1:{port}", "tok") as client, pytest.raises(ApiError) as raised:
        client.get_json("/api/v1/submissions")
    assert raised.value.code == "unreachable" and time.monotonic() - started < 1.0
