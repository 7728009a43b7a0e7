"""api/routes/submissions.py: upload validation (before queueing), visibility, listing."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
from sqlalchemy import select, update

from submissions.models import INFRASTRUCTURE_ERROR, Grading, Submission, SubmissionStatus
from submissions.service import derive_grading_seed

from ..helpers import bearer, create_student, instructor_headers, kernel_source, make_settings, upload


def test_valid_upload_is_queued_and_stored_with_its_hash(client, db_session, settings) -> None:
    student_id, token = create_student(client)
    source = kernel_source()
    response = upload(client, token, source, filename="../../etc/evil name.py")
    assert response.status_code == 202
    submission_id = response.json()["id"]
    assert response.json() == {
        "id": submission_id, "status": "queued", "assignment": "softmax_backward",
        "late": False, "due_at": None, "submissions_used": 1, "max_submissions": None,
        "late_text": None, "slip_days_spent": 0, "slip_days_left": 0}

    stored = db_session.get(Submission, submission_id)
    assert stored.source_text == source
    assert stored.source_sha256 == hashlib.sha256(source.encode()).hexdigest()
    assert stored.original_filename == "evil name.py"  # display only, never a path
    assert stored.student_id == student_id
    assert stored.seed == derive_grading_seed(
        deployment_seed="test-deployment-seed", submission_id=submission_id
    )
    # Its first grading is queued, current, and uses the submission's seed.
    [grading] = db_session.scalars(select(Grading).where(Grading.submission_id == submission_id))
    assert (grading.status, grading.is_current, grading.purpose, grading.seed) == (
        "queued", True, "submission", stored.seed)

    body = client.get(f"/api/v1/submissions/{submission_id}", headers=bearer(token)).json()
    assert body["status"] == "queued" and body["checks"] == [] and body["attempts"] == 0
    assert body["seed"] is None  # instructor-only
    source_response = client.get(f"/api/v1/submissions/{submission_id}/source",
                                 headers=instructor_headers())
    assert source_response.status_code == 200 and source_response.text == source
    assert source_response.headers["x-source-sha256"] == stored.source_sha256


def test_upload_needs_a_valid_token(client) -> None:
    assert upload(client, "not-a-token", kernel_source()).status_code == 401
    response = client.post("/api/v1/submissions", files={"file": ("k.py", b"x")})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_instructor_cannot_upload(client) -> None:
    response = client.post("/api/v1/submissions", files={"file": ("k.py", kernel_source().encode())},
                           headers=instructor_headers())
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "student_required"


@pytest.mark.parametrize(
    ("content", "status", "code"),
    [
        (b"def softmax_backward(y, g):\n    return '\xff\xfe'\n", 422, "source_not_utf8"),
        (b"\xff\xfe\x00d\x00e\x00f", 422, "source_not_utf8"),
        (b"def softmax_backward(y, g):\n    return y +\n", 422, "source_syntax_error"),
        (b"def softmax_backward(y, g):\n    return y\x00\n", 422, "source_syntax_error"),
        (b"def other(y, g):\n    return y\n", 422, "missing_function"),
        (b"class K:\n    def softmax_backward(self, y, g):\n        return y\n", 422, "missing_function"),
        (b"def helper():\n    softmax_backward = 3\n", 422, "missing_function"),
        (b"", 422, "upload_empty"),
        (b"  \n\t\r\n  \n", 422, "upload_empty"),
        (b"\xef\xbb\xbf\n", 422, "upload_empty"),
        (b"# only a comment\n", 422, "missing_function"),
    ],
)
def test_invalid_uploads_are_rejected_before_queueing(client, db_session, content, status, code) -> None:
    _, token = create_student(client)
    response = upload(client, token, content)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert db_session.scalars(select(Submission)).all() == []


@pytest.mark.parametrize(
    "content",
    [
        b"def _impl(y, g):\n    return y\n\nsoftmax_backward = _impl\n",
        b"from my_helpers import softmax_backward\n",
        b"try:\n    import triton\nexcept ImportError:\n    pass\nelse:\n    def softmax_backward(y, g):\n        return y\n",
    ],
)
def test_uploads_bind_the_function_as_grader_check_accepts(client, content) -> None:
    # One validator (grader/source_validation.py) for the API and `grader check`: any module-level
    # binding of the function passes here; whether it is callable is the grader's finding.
    _, token = create_student(client)
    response = upload(client, token, content)
    assert response.status_code == 202, response.text


def test_syntax_error_reports_line_and_column(client) -> None:
    _, token = create_student(client)
    response = upload(client, token, "import math\n\ndef softmax_backward(y, g):\n    return (y\n")
    error = response.json()["error"]
    assert error["code"] == "source_syntax_error"
    assert error["line"] == 4 and isinstance(error["column"], int)


def test_upload_over_the_cap_is_413(app_factory, settings, db_session) -> None:
    client = app_factory(make_settings(settings.database_url, max_upload_bytes=1024))
    _, token = create_student(client)
    exactly = kernel_source() + "#" * (1024 - len(kernel_source()) - 1) + "\n"
    assert len(exactly.encode()) == 1024
    assert upload(client, token, exactly).status_code == 202
    response = upload(client, token, exactly + "#")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "upload_too_large"
    # A body far beyond the cap is refused from its Content-Length, without being parsed.
    huge = upload(client, token, kernel_source() + "#" * 5_000_000)
    assert huge.status_code == 413
    assert len(db_session.scalars(select(Submission)).all()) == 1


def test_empty_upload_says_so(client) -> None:
    _, token = create_student(client)
    error = upload(client, token, b"").json()["error"]
    assert error["code"] == "upload_empty" and "empty" in error["message"]
    error = upload(client, token, b"\n \n").json()["error"]
    assert error["code"] == "upload_empty" and "only whitespace" in error["message"]


def test_upload_without_file_field_or_not_multipart(client) -> None:
    _, token = create_student(client)
    # data= alone is sent url-encoded, not as multipart/form-data
    response = client.post("/api/v1/submissions", data={"other": "x"}, headers=bearer(token))
    assert response.status_code == 422 and response.json()["error"]["code"] == "upload_malformed"
    response = client.post("/api/v1/submissions", content=b"def softmax_backward(): pass",
                           headers={**bearer(token), "content-type": "text/plain"})
    assert response.status_code == 422 and response.json()["error"]["code"] == "upload_malformed"


def test_unknown_assignment(client) -> None:
    _, token = create_student(client)
    response = upload(client, token, kernel_source(), assignment="matmul")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "unknown_assignment"


def test_rate_limit_is_429_with_retry_after_and_skips_infrastructure_errors(
    app_factory, settings, db_session
) -> None:
    client = app_factory(make_settings(settings.database_url, rate_limit_submissions=2,
                                       rate_limit_window_s=600))
    _, token = create_student(client)
    first = upload(client, token, kernel_source()).json()["id"]
    assert upload(client, token, kernel_source()).status_code == 202
    refused = upload(client, token, kernel_source())
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 600

    # Our fault does not count against the student.
    db_session.execute(update(Grading).where(Grading.submission_id == first).values(
        status=SubmissionStatus.ERROR, error_kind=INFRASTRUCTURE_ERROR))
    db_session.commit()
    assert upload(client, token, kernel_source()).status_code == 202
    assert upload(client, token, kernel_source()).status_code == 429

    # Submissions older than the window no longer count.
    db_session.execute(update(Submission).values(
        created_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=601)))
    db_session.commit()
    assert upload(client, token, kernel_source()).status_code == 202


def test_students_see_only_their_own_submissions(client) -> None:
    ada_id, ada = create_student(client, "ada")
    bob_id, bob = create_student(client, "bob")
    ada_submission = upload(client, ada, kernel_source()).json()["id"]
    bob_submission = upload(client, bob, kernel_source()).json()["id"]

    response = client.get(f"/api/v1/submissions/{bob_submission}", headers=bearer(ada))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "submission_not_found"
    assert client.get("/api/v1/submissions/999999", headers=bearer(ada)).status_code == 404
    # Students read their own source (and file name), never another's.
    own_source = client.get(f"/api/v1/submissions/{ada_submission}/source", headers=bearer(ada))
    assert own_source.status_code == 200 and own_source.text == kernel_source()
    assert 'filename="kernel.py"' in own_source.headers["content-disposition"]
    other_source = client.get(f"/api/v1/submissions/{bob_submission}/source", headers=bearer(ada))
    assert other_source.status_code == 404

    own = client.get("/api/v1/submissions", headers=bearer(ada)).json()["submissions"]
    assert [s["id"] for s in own] == [ada_submission]
    # A student cannot widen the list with ?student_id=.
    other = client.get(f"/api/v1/submissions?student_id={bob_id}", headers=bearer(ada)).json()
    assert [s["id"] for s in other["submissions"]] == [ada_submission]

    everyone = client.get("/api/v1/submissions", headers=instructor_headers()).json()["submissions"]
    assert [s["id"] for s in everyone] == [bob_submission, ada_submission]
    only_bob = client.get(f"/api/v1/submissions?student_id={bob_id}",
                          headers=instructor_headers()).json()["submissions"]
    assert [s["id"] for s in only_bob] == [bob_submission]
    detail = client.get(f"/api/v1/submissions/{ada_submission}", headers=instructor_headers()).json()
    assert detail["student_id"] == ada_id and detail["seed"] is not None
    missing = client.get("/api/v1/submissions?student_id=424242", headers=instructor_headers())
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "student_not_found"


def test_cap_is_enforced_while_streaming_without_content_length(app_factory, settings) -> None:
    client = app_factory(make_settings(settings.database_url, max_upload_bytes=1024))
    _, token = create_student(client)
    boundary = "testboundary"
    sent = []

    def body():
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
               f"filename=\"k.py\"\r\n\r\n").encode()
        for _ in range(1000):  # up to 1 MB, in 1 KiB chunks; the server stops reading early
            sent.append(1)
            yield b"#" * 1024
        yield f"\r\n--{boundary}--\r\n".encode()

    response = client.post(
        "/api/v1/submissions", content=body(),
        headers={**bearer(token), "content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "upload_too_large"


def test_file_sent_under_another_field_name_is_reported_as_missing_file(client, db_session) -> None:
    """`curl -F other=@softmax_backward.py`: the part's size is not a form-field problem."""
    _, token = create_student(client)
    response = client.post(
        "/api/v1/submissions",
        files={"other": ("softmax_backward.py", kernel_source().encode() * 20, "text/x-python")},
        data={"assignment": "softmax_backward"},
        headers=bearer(token),
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "upload_missing_file"
    assert "`file`" in error["message"] and "missing" in error["message"]
    assert error["fields"] == ["assignment", "other"]
    assert db_session.scalars(select(Submission)).all() == []


def test_empty_multipart_body_is_missing_file(client) -> None:
    _, token = create_student(client)
    response = client.post(
        "/api/v1/submissions", content=b"--b--\r\n",
        headers={**bearer(token), "content-type": "multipart/form-data; boundary=b"},
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "upload_missing_file"
    assert response.json()["error"]["fields"] == []


def test_a_long_assignment_field_is_still_malformed(client) -> None:
    _, token = create_student(client)
    response = upload(client, token, kernel_source(), assignment="x" * 201)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "upload_malformed" and "`assignment`" in error["message"]


def test_cap_applies_to_other_parts_while_streaming() -> None:
    """A huge part under another name is not buffered: the body cap stops reading it."""
    import asyncio

    from starlette.requests import Request

    from api.uploads import FRAMING_ALLOWANCE_BYTES, read_uploaded_file
    from submissions.errors import UploadTooLarge

    small = make_settings("sqlite:///unused.db", max_upload_bytes=1024)
    head = (b'--b\r\nContent-Disposition: form-data; name="other"; filename="k.py"\r\n\r\n')
    chunks = [head] + [b"#" * 1024] * 1000 + [b"\r\n--b--\r\n"]
    received = []

    async def receive() -> dict:
        received.append(1)
        return {"type": "http.request", "body": chunks[len(received) - 1],
                "more_body": len(received) < len(chunks)}

    request = Request({"type": "http", "method": "POST", "headers": [
        (b"content-type", b"multipart/form-data; boundary=b")]}, receive)
    with pytest.raises(UploadTooLarge):
        asyncio.run(read_uploaded_file(request, small))
    assert len(received) <= 2 + (1024 + FRAMING_ALLOWANCE_BYTES) // 1024


def test_an_unfinished_submission_says_its_queue_position_then_its_elapsed_time_and_limit(
        client, db_session) -> None:
    from submissions import repository

    _, ada = create_student(client, "ada-progress")
    _, bo = create_student(client, "bo-progress")
    first = upload(client, ada, kernel_source()).json()["id"]
    second = upload(client, bo, kernel_source()).json()["id"]
    read = lambda token, sid: client.get(f"/api/v1/submissions/{sid}", headers=bearer(token)).json()  # noqa: E731
    assert read(ada, first)["progress"] == {"phase": "queued", "queue_position": 1, "elapsed_s": None,
                                            "limit_s": None, "stage": None, "stage_label": None,
                                            "stage_elapsed_s": None}
    assert read(bo, second)["progress"]["queue_position"] == 2
    claimed = repository.claim_next_submission(db_session, worker_id="w", lease_s=30,
                                               now=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5))
    db_session.commit()
    assert claimed.submission_id == first
    running = read(ada, first)["progress"]
    assert running["phase"] == "running" and running["queue_position"] is None
    assert 4 <= running["elapsed_s"] < 60 and running["limit_s"] == 60.0  # make_settings' grader_timeout_s
    assert read(bo, second)["progress"]["queue_position"] == 1
    client.cookies.set("grader_session", bo)  # the page shows the same
    page = client.get(f"/submissions/{second}")
    assert "number 1 in the queue" in page.text
    assert running["stage"] is None  # no stage reported yet: the page says what comes
    assert repository.record_stage(db_session, submission_id=first, lease_token=claimed.lease_token,
                                   stage="compiling", started_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=2))
    assert not repository.record_stage(db_session, submission_id=first, lease_token="not-the-lease",
                                       stage="checks", started_at=dt.datetime.now(dt.UTC))
    db_session.commit()
    staged = read(ada, first)["progress"]
    assert staged["stage"] == "compiling" and staged["stage_label"] == "compiling your kernels"
    assert 1 <= staged["stage_elapsed_s"] < 60
    client.cookies.set("grader_session", ada)
    assert '<strong class="stage">compiling your kernels</strong> for' in client.get(f"/submissions/{first}").text
