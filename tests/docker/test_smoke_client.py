"""docker/local/smoke_client.py, the HTTP half of `make compose-smoke`, against a stub API.

The real run is recorded in docs/compose/; here a small HTTP server in a thread answers the
way the API does (degraded then ok health, 202 on upload, 503 + Retry-After, queued -> running
-> passed), so the client's waiting, multipart and verdict logic is checked without Docker.
"""

from __future__ import annotations

import email.parser
import email.policy
import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from deploy_files import DOCKER

_spec = importlib.util.spec_from_file_location("smoke_client", DOCKER / "local" / "smoke_client.py")
smoke_client = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(smoke_client)

TOKEN = "gst_test-token"
PASSED = {
    "id": 7, "student_id": 1, "assignment": "softmax_backward", "status": "passed",
    "created_at": "2026-12-01T00:00:00Z", "finished_at": "2026-12-01T00:00:15Z",
    "device": "cpu (Triton interpreter)", "versions": {"triton": "3.6.0", "torch": "2.13.0+cpu"},
    "checks": [{"name": "example_two_element", "passed": True, "skipped": False, "message": "1 cases"}],
    "error": None, "worker_id": "w1", "attempts": 1, "grading_duration_s": 12.5,
}


class StubAPI:
    """Scripted answers; records what the client sent."""

    def __init__(self, health: list[tuple[int, dict]], polls: list[tuple[int, dict, dict]]):
        self.health = list(health)
        self.polls = list(polls)
        self.uploads: list[tuple[dict, bytes]] = []

    def handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status, body, headers=None):
                data = json.dumps(body).encode()
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/healthz":
                    status, body = api.health.pop(0) if len(api.health) > 1 else api.health[0]
                    return self._send(status, body)
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._send(401, {"error": {"code": "unauthenticated"}})
                status, body, headers = api.polls.pop(0) if len(api.polls) > 1 else api.polls[0]
                return self._send(status, body, headers)

            def do_POST(self):
                length = int(self.headers["Content-Length"])
                api.uploads.append((dict(self.headers), self.rfile.read(length)))
                return self._send(202, {"id": 7, "status": "queued"})

        return Handler


@pytest.fixture()
def serve():
    servers = []

    def start(api: StubAPI) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), api.handler())
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


def _no_sleep(_seconds: float) -> None:
    pass


def test_waits_for_a_live_worker(serve):
    degraded = {"status": "degraded", "database": "ok", "workers": []}
    ok = {"status": "ok", "database": "ok", "workers": [{"worker_id": "w1", "alive": True}]}
    base = serve(StubAPI(health=[(503, {"status": "unavailable"}), (200, degraded), (200, ok)], polls=[]))
    assert smoke_client.wait_until_healthy(base, timeout_s=60, sleep=_no_sleep)["status"] == "ok"


def test_gives_up_on_health_with_the_last_answer(serve):
    base = serve(StubAPI(health=[(200, {"status": "degraded"})], polls=[]))
    ticks = iter(range(100))
    with pytest.raises(smoke_client.SmokeFailure, match="degraded"):
        smoke_client.wait_until_healthy(base, timeout_s=3, sleep=_no_sleep, clock=lambda: next(ticks))


def test_uploads_multipart_and_follows_the_status_to_the_end(serve, tmp_path, capsys):
    source = tmp_path / "kernel.py"
    source.write_text("def softmax_backward(y, g):\n    return y\n")
    api = StubAPI(health=[(200, {"status": "ok"})], polls=[
        (200, {**PASSED, "status": "queued"}, {}),
        (503, {"error": {"code": "overloaded"}}, {"Retry-After": "1"}),
        (200, {**PASSED, "status": "running"}, {}),
        (200, PASSED, {}),
    ])
    base = serve(api)
    submission_id = smoke_client.submit(base, TOKEN, source, "softmax_backward")
    assert submission_id == 7
    headers, body = api.uploads[0]
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {headers['Content-Type']}\r\n\r\n".encode() + body)
    parts = {p.get_param("name", header="content-disposition"): p for p in message.iter_parts()}
    assert parts["assignment"].get_content().strip() == "softmax_backward"
    assert parts["file"].get_filename() == "kernel.py"
    assert parts["file"].get_payload(decode=True) == source.read_bytes()

    done = smoke_client.wait_for_final_status(base, TOKEN, 7, timeout_s=60, sleep=_no_sleep)
    assert done["status"] == "passed"
    printed = capsys.readouterr().out
    assert [line.split()[-1] for line in printed.splitlines() if "-> status" in line] == ["queued", "running", "passed"]


def test_an_unexpected_answer_fails_at_once(serve):
    base = serve(StubAPI(health=[(200, {"status": "ok"})], polls=[(404, {"error": {"code": "not_found"}}, {})]))
    with pytest.raises(smoke_client.SmokeFailure, match="404"):
        smoke_client.wait_for_final_status(base, TOKEN, 7, timeout_s=60, sleep=_no_sleep)


@pytest.mark.parametrize(("headers", "expected"), [
    ({"Retry-After": "3"}, 3.0), ({"retry-after": "120"}, 30.0), ({"Retry-After": "soon"}, 2.0), ({}, 2.0),
])
def test_retry_after(headers, expected):
    assert smoke_client.retry_after_seconds(headers, 2.0) == expected


def test_verdict_problems():
    assert smoke_client.verdict_problems(PASSED, expect_status="passed", expect_triton="3.6.0") == []
    wrong = {**PASSED, "status": "failed", "versions": {"triton": "3.3.1"}, "checks": []}
    problems = smoke_client.verdict_problems(wrong, expect_status="passed", expect_triton="3.6.0")
    assert len(problems) == 3
    assert any("3.3.1" in p for p in problems)


def test_summary_names_every_check_and_the_versions():
    lines = smoke_client.summary_lines(PASSED)
    assert lines[0].startswith("submission 7: passed")
    assert any('"triton": "3.6.0"' in line for line in lines)
    assert any("ok   example_two_element" in line for line in lines)
