"""The request path of issue 10, on SQLite and PostgreSQL: bounded integer parameters,
the token checked before any body is read, the JSON cap, strict multipart, idempotent
creation (Idempotency-Key) and the long-poll. (Overload against a real server process:
test_overload.py.)"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.main import create_app
from submissions.models import IdempotencyKey, Student, Submission

from ..helpers import (
    Clock,
    bearer,
    create_student,
    grade_next,
    instructor_headers,
    kernel_source,
    make_outcome,
    upload,
    upload_graded,
    wait_until,
)

TOO_BIG_ID = 2**31


# ------------------------------------------------------------------ integer bounds


@pytest.mark.parametrize("path", [
    f"/api/v1/submissions/{TOO_BIG_ID}",
    f"/api/v1/submissions/{TOO_BIG_ID}/source",
    f"/api/v1/submissions/{TOO_BIG_ID}/gradings",
    f"/api/v1/submissions/{2**63}",
    "/api/v1/submissions/0",
    f"/api/v1/submissions?offset={2**63}",
    f"/api/v1/submissions?student_id={TOO_BIG_ID}",
    f"/api/v1/students/{TOO_BIG_ID}",
    f"/api/v1/regrades/{TOO_BIG_ID}",
    f"/api/v1/regrades?offset={2**63}",
    f"/api/v1/audit?offset={2**63}",
])
def test_out_of_range_ids_and_offsets_are_422_never_500(client, path) -> None:
    response = client.get(path, headers=instructor_headers())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"


def test_the_largest_id_is_a_plain_not_found(client) -> None:
    response = client.get(f"/api/v1/submissions/{TOO_BIG_ID - 1}", headers=instructor_headers())
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "submission_not_found"


def test_out_of_range_ids_in_a_body_are_422(client) -> None:
    response = client.post("/api/v1/regrades", headers=instructor_headers(), json={
        "assignment": "softmax_backward", "submission_ids": [TOO_BIG_ID]})
    assert response.status_code == 422 and response.json()["error"]["code"] == "validation_error"


# ---------------------------------------------------- the token before any body


class _Receive:
    """An ASGI receive that hands out `chunks` and counts what was read."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.read_bytes = 0
        self.calls = 0

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if not self.chunks:
            return {"type": "http.disconnect"}
        chunk = self.chunks.pop(0)
        self.read_bytes += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}


def _call_app(app: Any, *, headers: dict[str, str], receive: _Receive,
              path: str = "/api/v1/students") -> tuple[int, dict[str, str], bytes]:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": b"", "server": ("testserver", 80), "client": ("127.0.0.1", 5000),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    anyio.run(app, scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


HUNDRED_MB = str(100 * 1024 * 1024)


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-token", "Basic abc"])
def test_a_100_mb_body_without_a_valid_token_is_refused_before_it_is_read(
        client, authorization) -> None:
    headers = {"content-type": "application/json", "content-length": HUNDRED_MB}
    if authorization:
        headers["authorization"] = authorization
    receive = _Receive([b"x" * 65536] * 3)
    status, response_headers, body = _call_app(client.app, headers=headers, receive=receive)
    assert status == 401 and b'"not_authenticated"' in body
    assert response_headers["www-authenticate"] == "Bearer"
    assert receive.calls == 0  # not one byte of the body was read


def test_an_upload_without_a_valid_token_is_refused_before_it_is_read(client) -> None:
    receive = _Receive([b"x" * 65536] * 3)
    status, _headers, _body = _call_app(
        client.app, path="/api/v1/submissions", receive=receive,
        headers={"content-type": "multipart/form-data; boundary=XX",
                 "content-length": HUNDRED_MB, "authorization": "Bearer nope"})
    assert status == 401 and receive.calls == 0


def test_json_bodies_are_capped_by_declared_length_and_while_streaming(client) -> None:
    headers = {"content-type": "application/json", "content-length": HUNDRED_MB,
               **{k.lower(): v for k, v in instructor_headers().items()}}
    receive = _Receive([b"x" * 65536] * 3)
    status, _h, body = _call_app(client.app, headers=headers, receive=receive)
    assert status == 413 and b'"body_too_large"' in body and receive.calls == 0

    del headers["content-length"]  # chunked: refused as soon as the cap is passed
    receive = _Receive([b"x" * 16384] * 100)
    status, _h, body = _call_app(client.app, headers=headers, receive=receive)
    assert status == 413 and b'"body_too_large"' in body
    assert receive.read_bytes <= 64 * 1024 + 16384


def test_a_json_body_over_the_cap_is_413_and_creates_nothing(client, db_session) -> None:
    response = client.post("/api/v1/students", headers=instructor_headers(),
                           json={"name": "ada", "email": "a" * (70 * 1024)})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert response.json()["error"]["max_bytes"] == 64 * 1024
    assert db_session.scalar(select(func.count()).select_from(Student)) == 0


# ------------------------------------------------------------------ strict multipart


def test_a_multipart_body_without_its_closing_boundary_is_400_and_not_stored(
        client, db_session) -> None:
    _student_id, token = create_student(client)
    body = (b"--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"k.py\"\r\n"
            b"Content-Type: text/x-python\r\n\r\n" + kernel_source().encode() + b"\r\n")
    for cut in (body, body + b"--XX", body[:-20]):
        response = client.post("/api/v1/submissions", content=cut, headers={
            **bearer(token), "Content-Type": "multipart/form-data; boundary=XX"})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "upload_truncated"
    assert db_session.scalar(select(func.count()).select_from(Submission)) == 0
    whole = client.post("/api/v1/submissions", content=body + b"--XX--\r\n", headers={
        **bearer(token), "Content-Type": "multipart/form-data; boundary=XX"})
    assert whole.status_code == 202, whole.text


# ------------------------------------------------------------------ idempotency


def _keyed(key: str) -> dict[str, str]:
    return {**instructor_headers(), "Idempotency-Key": key}


def test_a_retried_student_creation_returns_the_first_answer(client, db_session) -> None:
    first = client.post("/api/v1/students", json={"name": "ada"}, headers=_keyed("k-1"))
    again = client.post("/api/v1/students", json={"name": "ada"}, headers=_keyed("k-1"))
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()  # the same id and the same token
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert db_session.scalar(select(func.count()).select_from(Student)) == 1
    # The token works, and the stored answer does not show it.
    assert client.get("/api/v1/me", headers=bearer(first.json()["token"])).status_code == 200
    [row] = db_session.scalars(select(IdempotencyKey)).all()
    assert first.json()["token"] not in (row.response_body or "")
    assert row.key_sha256 != "k-1" and row.scope == "instructor"
    # Without a key a retry is a second request, as before: 409.
    assert client.post("/api/v1/students", json={"name": "ada"},
                       headers=instructor_headers()).status_code == 409


def test_the_same_key_for_another_request_is_422(client) -> None:
    assert client.post("/api/v1/students", json={"name": "ada"},
                       headers=_keyed("k-2")).status_code == 201
    reused = client.post("/api/v1/students", json={"name": "bob"}, headers=_keyed("k-2"))
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"


def test_a_refused_request_stores_no_answer(client, db_session) -> None:
    create_student(client, "ada")
    refused = client.post("/api/v1/students", json={"name": "ADA "}, headers=_keyed("k-3"))
    assert refused.status_code == 409
    assert db_session.scalar(select(func.count()).select_from(IdempotencyKey)) == 0
    # The same key is still free for the request the caller meant.
    assert client.post("/api/v1/students", json={"name": "ADA "},
                       headers=_keyed("k-3")).status_code == 409


def test_a_retried_upload_returns_the_same_submission_and_is_counted_once(
        client, db_session) -> None:
    _sid, token = create_student(client)
    headers = {**bearer(token), "Idempotency-Key": "upload-1"}
    files = {"file": ("k.py", kernel_source().encode(), "text/x-python")}
    first = client.post("/api/v1/submissions", files=files, headers=headers)
    again = client.post("/api/v1/submissions", files=files, headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json() and first.json()["submissions_used"] == 1
    assert db_session.scalar(select(func.count()).select_from(Submission)) == 1
    other = client.post("/api/v1/submissions", headers=headers, files={
        "file": ("k.py", kernel_source("other").encode(), "text/x-python")})
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    # Keys belong to their caller: another student's same key is another request.
    _sid2, token2 = create_student(client, "bob")
    theirs = client.post("/api/v1/submissions", files=files,
                         headers={**bearer(token2), "Idempotency-Key": "upload-1"})
    assert theirs.status_code == 202 and theirs.json()["id"] != first.json()["id"]


def test_keys_expire_after_a_day(client, db_session) -> None:
    start = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
    clock = Clock(client, start)
    _sid, token = create_student(client)
    headers = {**bearer(token), "Idempotency-Key": "upload-2"}
    files = {"file": ("k.py", kernel_source().encode(), "text/x-python")}
    first = client.post("/api/v1/submissions", files=files, headers=headers).json()["id"]
    clock.set(start + dt.timedelta(hours=23))
    assert client.post("/api/v1/submissions", files=files, headers=headers).json()["id"] == first
    clock.set(start + dt.timedelta(hours=25))
    later = client.post("/api/v1/submissions", files=files, headers=headers)
    assert later.status_code == 202 and later.json()["id"] != first
    assert db_session.scalar(select(func.count()).select_from(IdempotencyKey)) == 1


@pytest.mark.parametrize("key", ["", "x" * 201, "has space"])
def test_malformed_keys_are_422(client, key) -> None:
    response = client.post("/api/v1/students", json={"name": "ada"}, headers=_keyed(key))
    assert response.status_code == 422 and response.json()["error"]["code"] == "validation_error"


def test_concurrent_requests_with_one_key_create_one_row(committed_db) -> None:
    """Two requests racing with the same key (PostgreSQL: the second insert waits on the
    first's row, then reads its answer; SQLite: BEGIN IMMEDIATE serialises them)."""
    settings = committed_db.settings()
    with TestClient(create_app(settings)) as api:
        results: list[Any] = []
        barrier = threading.Barrier(4)

        def create() -> None:
            barrier.wait()
            results.append(api.post("/api/v1/students", json={"name": "ada"},
                                    headers=_keyed("race")))

        threads = [threading.Thread(target=create) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert [r.status_code for r in results] == [201] * 4, [r.text for r in results]
    assert len({r.json()["token"] for r in results}) == 1
    with committed_db.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Student)) == 1
        assert session.scalar(select(func.count()).select_from(IdempotencyKey)) == 1


# ------------------------------------------------------------------ long-poll


def test_a_long_poll_on_a_finished_submission_answers_at_once(client, db_session) -> None:
    _sid, token = create_student(client)
    submission_id = upload_graded(client, db_session, token, make_outcome("passed"))
    started = time.monotonic()
    response = client.get(f"/api/v1/submissions/{submission_id}?wait=30", headers=bearer(token))
    assert response.status_code == 200 and response.json()["status"] == "passed"
    assert time.monotonic() - started < 5


def test_a_long_poll_waits_out_its_time_when_nothing_changes(client) -> None:
    _sid, token = create_student(client)
    submission_id = upload(client, token, kernel_source()).json()["id"]
    started = time.monotonic()
    response = client.get(f"/api/v1/submissions/{submission_id}?wait=2", headers=bearer(token))
    elapsed = time.monotonic() - started
    assert response.status_code == 200 and response.json()["status"] == "queued"
    assert 1.9 <= elapsed < 10
    assert client.get(f"/api/v1/submissions/{submission_id}?wait=61",
                      headers=bearer(token)).status_code == 422
    # Another student's submission is not found, without waiting.
    _other, other_token = create_student(client, "bob")
    started = time.monotonic()
    hidden = client.get(f"/api/v1/submissions/{submission_id}?wait=30",
                        headers=bearer(other_token))
    assert hidden.status_code == 404 and time.monotonic() - started < 5
    assert client.get(f"/api/v1/submissions/{submission_id}?wait=30").status_code == 401


def test_a_long_poll_answers_when_the_status_changes(committed_db) -> None:
    settings = committed_db.settings(long_poll_interval_s=0.1)
    with TestClient(create_app(settings)) as api:
        created = api.post("/api/v1/students", json={"name": "ada"}, headers=instructor_headers())
        token = created.json()["token"]
        submission_id = upload(api, token, kernel_source()).json()["id"]
        answers: list[Any] = []

        def poll() -> None:
            started = time.monotonic()
            answer = api.get(f"/api/v1/submissions/{submission_id}?wait=30",
                             headers=bearer(token))
            answers.append((answer, time.monotonic() - started))

        poller = threading.Thread(target=poll)
        poller.start()
        time.sleep(0.5)
        with committed_db.session_factory() as session:
            grade_next(session, make_outcome("failed"))
        graded_at = time.monotonic()
        poller.join(35)
        wait_until(lambda: answers, timeout=5, message="the long-poll's answer")
    answer, elapsed = answers[0]
    assert answer.status_code == 200 and answer.json()["status"] == "failed"
    assert elapsed < 10 and time.monotonic() - graded_at < 5


def test_long_polls_share_one_status_query_per_interval(committed_db) -> None:
    """20 students waiting at once cost one status query per interval, not one read each
    (api/longpoll.py): on deadline night the graders keep the CPU."""
    settings = committed_db.settings(long_poll_interval_s=0.1)
    with TestClient(create_app(settings)) as api:
        pollers = []
        for index in range(20):
            created = api.post("/api/v1/students", json={"name": f"s{index}"}, headers=instructor_headers())
            token = created.json()["token"]
            pollers.append((token, upload(api, token, kernel_source()).json()["id"]))
        watcher = api.app.state.status_watcher
        answers: list[Any] = []

        def poll(token: str, submission_id: int) -> None:
            answers.append(api.get(f"/api/v1/submissions/{submission_id}?wait=2", headers=bearer(token)))

        threads = [threading.Thread(target=poll, args=poller) for poller in pollers]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        elapsed = time.monotonic() - started
    assert len(answers) == 20 and all(a.status_code == 200 and a.json()["status"] == "queued" for a in answers)
    # One query per 0.1 s while anyone waits (about 2 s): ~20, where one read per waiter
    # per interval would have been ~400.
    assert 5 <= watcher.queries <= elapsed / 0.1 + 5, (watcher.queries, elapsed)
    assert watcher.waiting == 0


# ------------------------------------------------------- database saturation and outage


def test_no_free_connection_in_time_is_503_overloaded_with_retry_after(committed_db) -> None:
    settings = committed_db.settings(api_threads=4, db_pool_timeout_s=0.2)
    app = create_app(settings)
    held = [app.state.engine.connect() for _ in range(4)]  # the whole pool
    try:
        with TestClient(app) as api:
            for method, path in (("GET", "/api/v1/students"), ("POST", "/api/v1/students")):
                started = time.monotonic()
                response = api.request(method, path, json={"name": "ada"},
                                       headers=instructor_headers())
                assert response.status_code == 503, response.text
                assert response.json()["error"]["code"] == "overloaded"
                assert response.headers["retry-after"].isdigit()
                assert time.monotonic() - started < 5
    finally:
        for connection in held:
            connection.close()
    with TestClient(app) as api:  # and it recovers at once
        assert api.get("/api/v1/students", headers=instructor_headers()).status_code == 200


def test_an_unreachable_database_is_503_with_retry_after_never_500() -> None:
    from ..helpers import make_settings

    app = create_app(make_settings("postgresql+psycopg://postgres@127.0.0.1:1/none",
                                   db_pool_timeout_s=1))
    with TestClient(app) as api:
        for method, path in (("GET", "/api/v1/students"),
                             ("GET", "/api/v1/submissions/1?wait=5"),
                             ("POST", "/api/v1/students")):
            response = api.request(method, path, json={"name": "ada"},
                                   headers=instructor_headers())
            assert response.status_code == 503, (path, response.text)
            assert response.json()["error"]["code"] == "database_unavailable"
            assert response.headers["retry-after"].isdigit()


def test_a_request_over_the_admission_bound_waits_for_a_place_and_gets_it(app_factory, settings) -> None:
    """Issue 38: a request that finds every place taken waits in the queue (on the event
    loop, no thread) and is answered as soon as a place frees, not refused at once."""
    with app_factory(settings.model_copy(update={"api_queue_target_s": 5.0})) as api:
        gate = api.app.state.admission.api
        api.portal.call(lambda: setattr(gate, "holders", gate.places))  # every place taken
        answers: list[Any] = []
        started = time.monotonic()
        reader = threading.Thread(target=lambda: answers.append(
            api.get("/api/v1/me", headers=instructor_headers())))
        reader.start()
        wait_until(lambda: api.portal.call(lambda: gate.queued) == 1, timeout=5,
                   message="the request queued")
        time.sleep(0.3)
        assert answers == []  # still waiting, not refused
        api.portal.call(gate.leave)  # a place frees: handed to the waiting request
        reader.join(10)
        assert answers[0].status_code == 200, answers[0].text
        assert 0.3 <= time.monotonic() - started < 5
        assert gate.refused == 0 and gate.admitted_after_wait == 1
        api.portal.call(lambda: setattr(gate, "holders", 0))


def test_a_request_is_refused_only_after_the_queue_target(app_factory, settings) -> None:
    """Beyond the target delay with no place free: 503 overloaded + Retry-After, no sooner
    than the target and not much later; health checks and static files are bounded apart."""
    with app_factory(settings.model_copy(update={"api_queue_target_s": 0.5})) as api:
        gate = api.app.state.admission.api
        api.portal.call(lambda: setattr(gate, "holders", gate.places))  # as if every place were taken
        try:
            started = time.monotonic()
            response = api.get("/api/v1/me", headers=instructor_headers())
            waited = time.monotonic() - started
            assert response.status_code == 503
            assert response.json()["error"]["code"] == "overloaded"
            assert response.headers["retry-after"] == "1"
            assert 0.5 <= waited < 3.0, waited  # generous: a loaded 2-core machine
            assert gate.refused_late == 1
            health = api.get("/healthz")  # bounded apart
            assert health.status_code == 200
            assert api.get("/static/pages.css").status_code == 200  # never counted
        finally:
            api.portal.call(lambda: setattr(gate, "holders", 0))
        assert api.get("/api/v1/me", headers=instructor_headers()).status_code == 200


def test_a_full_queue_is_refused_at_once(app_factory, settings) -> None:
    with app_factory(settings.model_copy(update={"api_max_queued": 0})) as api:
        gate = api.app.state.admission.api
        api.portal.call(lambda: setattr(gate, "holders", gate.places))
        try:
            started = time.monotonic()
            response = api.get("/api/v1/me", headers=instructor_headers())
            assert response.status_code == 503 and response.headers["retry-after"] == "1"
            assert time.monotonic() - started < 0.5 and gate.refused_full == 1
        finally:
            api.portal.call(lambda: setattr(gate, "holders", 0))
