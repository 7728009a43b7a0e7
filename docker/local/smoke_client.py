"""The HTTP half of docker/local/compose-smoke.sh: what a student and the staff do against a
freshly started stack, with the standard library only (it runs on the host, outside the images).

    python docker/local/smoke_client.py --base-url http://127.0.0.1:18000 \
        --student-token gst_... --file grader/assignments/softmax_backward/reference.py

1. waits until `/healthz` answers 200 with `status: ok` (the database answers and a worker
   has sent a heartbeat), unless --no-health-wait (the caller read it where it is served);
2. uploads the file as `POST /api/v1/submissions` (multipart, like `curl -F file=@...`);
3. polls `GET /api/v1/submissions/{id}` until the status is final (`passed`, `failed`,
   `error`), honouring Retry-After on 503;
4. prints the verdict, each check, the device and the grader's versions, and exits 0 only if
   the status is the expected one (`passed`) and, with --expect-triton, the worker graded with
   that Triton version.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

FINAL_STATUSES = frozenset({"passed", "failed", "error"})


class SmokeFailure(Exception):
    """The stack did not do what the smoke test expects; the message says what."""


def _request(method: str, url: str, *, token: str | None = None, body: bytes | None = None,
             content_type: str | None = None, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers or {}), exc.read()


def multipart_body(fields: dict[str, str], file_field: str, filename: str,
                   content: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body (RFC 7578) and its Content-Type, as `curl -F` sends it."""
    boundary = f"smoke-{uuid.uuid4().hex}"
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                     f"{value}\r\n".encode())
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; '
                 f'filename="{filename}"\r\nContent-Type: text/x-python\r\n\r\n'.encode()
                 + content + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def retry_after_seconds(headers: dict[str, str], default: float) -> float:
    """Retry-After in seconds (the API sends an integer), else the default; capped at 30 s."""
    value = {k.lower(): v for k, v in headers.items()}.get("retry-after")
    try:
        return min(max(float(value), 0.0), 30.0) if value is not None else default
    except ValueError:
        return default


def wait_until_healthy(base_url: str, *, timeout_s: float, sleep: Callable[[float], None] = time.sleep,
                       clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """The first `/healthz` document whose status is `ok` (a live worker); SmokeFailure after
    timeout_s with the last answer seen."""
    deadline = clock() + timeout_s
    last = "no answer"
    while True:
        try:
            status, _, body = _request("GET", f"{base_url}/healthz")
            last = f"{status} {body[:300]!r}"
            if status == 200:
                health = json.loads(body)
                if health.get("status") == "ok":
                    return health
        except (OSError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if clock() >= deadline:
            raise SmokeFailure(f"/healthz not ok after {timeout_s:g} s; last answer: {last}")
        sleep(1.0)


def submit(base_url: str, token: str, path: Path, assignment: str) -> int:
    body, content_type = multipart_body({"assignment": assignment}, "file", path.name, path.read_bytes())
    status, _, answer = _request("POST", f"{base_url}/api/v1/submissions", token=token,
                                 body=body, content_type=content_type)
    if status != 202:
        raise SmokeFailure(f"upload refused: {status} {answer[:500]!r}")
    created = json.loads(answer)
    print(f"POST /api/v1/submissions -> 202 {json.dumps(created)}", flush=True)
    return int(created["id"])


def wait_for_final_status(base_url: str, token: str, submission_id: int, *, timeout_s: float,
                          sleep: Callable[[float], None] = time.sleep,
                          clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """The submission document once its status is final; SmokeFailure after timeout_s."""
    deadline = clock() + timeout_s
    seen = None
    while True:
        status, headers, body = _request("GET", f"{base_url}/api/v1/submissions/{submission_id}", token=token)
        pause = 2.0
        if status == 200:
            submission = json.loads(body)
            if submission["status"] != seen:
                seen = submission["status"]
                print(f"GET /api/v1/submissions/{submission_id} -> status {seen}", flush=True)
            if seen in FINAL_STATUSES:
                return submission
        elif status == 503:
            pause = retry_after_seconds(headers, pause)
        else:
            raise SmokeFailure(f"GET /api/v1/submissions/{submission_id}: {status} {body[:500]!r}")
        if clock() + pause > deadline:
            raise SmokeFailure(f"submission {submission_id} still {seen} after {timeout_s:g} s")
        sleep(pause)


def summary_lines(submission: dict[str, Any]) -> list[str]:
    """What the log records of a graded submission: verdict, timings, device, versions, checks."""
    lines = [
        f"submission {submission['id']}: {submission['status']} "
        f"(assignment {submission.get('assignment')}, worker {submission.get('worker_id')}, "
        f"attempts {submission.get('attempts')}, grading {submission.get('grading_duration_s')} s)",
        f"created {submission.get('created_at')} finished {submission.get('finished_at')}",
        f"device: {submission.get('device')}",
        f"versions: {json.dumps(submission.get('versions'), sort_keys=True)}",
    ]
    for check in submission.get("checks") or []:
        mark = "skip" if check.get("skipped") else ("ok  " if check.get("passed") else "FAIL")
        lines.append(f"  {mark} {check.get('name')}: {check.get('message')}")
    if submission.get("error"):
        lines.append(f"error: {json.dumps(submission['error'])}")
    return lines


def verdict_problems(submission: dict[str, Any], *, expect_status: str,
                     expect_triton: str | None) -> list[str]:
    """Why this result is not the one the smoke test expects (empty: it is)."""
    problems = []
    if submission.get("status") != expect_status:
        problems.append(f"status {submission.get('status')!r}, expected {expect_status!r}")
    if not submission.get("checks"):
        problems.append("no check verdicts were stored")
    if expect_triton is not None:
        graded_with = (submission.get("versions") or {}).get("triton")
        if graded_with != expect_triton:
            problems.append(f"graded with triton {graded_with!r}, expected {expect_triton!r}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--student-token", required=True)
    parser.add_argument("--file", required=True, type=Path)
    parser.add_argument("--assignment", default="softmax_backward")
    parser.add_argument("--expect-status", default="passed")
    parser.add_argument("--expect-triton", default=None, help="e.g. 3.6.0")
    parser.add_argument("--health-timeout", type=float, default=180.0)
    parser.add_argument("--no-health-wait", action="store_true",
                        help="skip step 1: the caller checked /healthz itself (behind the TLS proxy, "
                             "which keeps /healthz for staff, it is read inside the API's container)")
    parser.add_argument("--grading-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    base = args.base_url.rstrip("/")
    try:
        if not args.no_health_wait:
            health = wait_until_healthy(base, timeout_s=args.health_timeout)
            print(f"GET /healthz -> 200 {json.dumps(health)}", flush=True)
        submission_id = submit(base, args.student_token, args.file, args.assignment)
        submission = wait_for_final_status(base, args.student_token, submission_id,
                                           timeout_s=args.grading_timeout)
    except SmokeFailure as exc:
        print(f"SMOKE FAILED: {exc}", file=sys.stderr)
        return 1
    for line in summary_lines(submission):
        print(line)
    problems = verdict_problems(submission, expect_status=args.expect_status,
                                expect_triton=args.expect_triton)
    for problem in problems:
        print(f"SMOKE FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
