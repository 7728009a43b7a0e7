"""Deadline-night load on a running service: N students created through the API, their
uploads sent at once, then every upload polled as `grader submit` polls it, until all are
finalised or the time is up. Loopback only, bounded in count and time.

    python scripts/loadtest.py --server http://127.0.0.1:8000 --instructor-token T \
        --students 10 --out /tmp/load.json

What it records (`LoadResult`, the JSON it writes): per-route latency p50/p95/p99 and
status-code counts, uploads accepted (202) vs finalised (a verdict seen by the poller),
duplicates (more submissions on the server than were acknowledged, i.e. the same student
and content stored twice), the queue drain (finalised over time) and the recovery time
after the load (until `/healthz` and a submission GET both answer in under 1 s).

Polling: with `?wait=` (long-poll) when the server's OpenAPI document declares it for
`GET /api/v1/submissions/{id}`, else as the CLI does (client/cli.py `wait_for_verdict`: the
interval starts at `--poll-interval` and grows 1.5x up to 10 s while queued). Retries as
the CLI's ServiceClient: 503 (respecting Retry-After) and connection failures are retried
with jittered exponential backoff for up to 60 s; every POST carries an Idempotency-Key
that stays the same across its retries (servers without idempotency ignore it).

Uploads: upload 1 of each student is the assignment's reference solution, upload 2 the
reference with its sign flipped (`g - dot` -> `g + dot`, as in tests/service/test_end_to_end.py;
it fails the checks); each carries a comment naming the student and upload, so every upload's
content is unique. Grading is the service's own.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import ipaddress
import json
import random
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, Field

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
REFERENCE = REPOSITORY_ROOT / "grader" / "assignments" / "softmax_backward" / "reference.py"
TERMINAL = frozenset({"passed", "failed", "error"})
RETRY_FOR_S = 60.0  # as client/http.py ServiceClient's default

#: Hard bounds, whatever the command line says.
MAX_STUDENTS, MAX_UPLOADS_PER_STUDENT, MAX_CONCURRENCY, MAX_DURATION_S = 1000, 5, 500, 3600.0


# ------------------------------------------------------------------------ the result


class LoadConfig(BaseModel):
    """The load's parameters (seconds; counts)."""

    server: str
    students: int = Field(200, ge=1, le=MAX_STUDENTS)
    uploads_per_student: int = Field(2, ge=1, le=MAX_UPLOADS_PER_STUDENT)
    concurrency: int = Field(200, ge=1, le=MAX_CONCURRENCY)
    poll_interval_s: float = Field(1.0, gt=0)
    long_poll_wait_s: float = Field(20.0, gt=0, description="?wait= when the server has it")
    request_timeout_s: float = Field(60.0, gt=0)
    max_duration_s: float = Field(1500.0, gt=0, le=MAX_DURATION_S,
                                  description="the whole run, polling included")
    recovery_limit_s: float = Field(180.0, gt=0)


class RouteStats(BaseModel):
    """Latency (milliseconds) and answers of one route; errors without an HTTP answer are
    counted under their exception name."""

    requests: int
    statuses: dict[str, int]
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None


class DrainSample(BaseModel):
    """Finalised uploads at `t_s` seconds after the first upload."""

    t_s: float
    finalised: int
    queue_depth: int | None


class Duplicates(BaseModel):
    """More stored submissions than acknowledged ones (a retried or timed-out POST stored
    twice). Every upload's content is unique, so any surplus is a duplicate."""

    submissions_on_server: int | None
    acknowledged: int
    surplus: int | None = Field(description="sum over students of max(0, stored - acknowledged)")
    students_with_surplus: list[int]
    same_content_twice: int | None = Field(
        description="stored submissions whose (student, content) another one already has")


class LoadResult(BaseModel):
    """What `run_load` measured (the JSON this script writes; scripts/load_stack.py embeds
    it)."""

    config: LoadConfig
    started_at: dt.datetime
    finished_at: dt.datetime
    long_poll: bool
    phases_s: dict[str, float]
    students_created: int
    uploads_attempted: int
    uploads_accepted: int
    upload_answers: dict[str, int]
    finalised: int
    finalised_by_status: dict[str, int]
    not_finalised: int
    all_finalised: bool
    server_errors_5xx: int
    server_errors_500: int
    routes: dict[str, RouteStats]
    drain: list[DrainSample]
    drain_rate_per_min: float | None
    duplicates: Duplicates
    recovery_s: float | None = Field(description="after the load: until /healthz and a GET "
                                                 "both answer in < 1 s; None if not in time")


# ------------------------------------------------------------------------ the client


def require_loopback(server: str) -> None:
    """Raises ValueError unless `server` is an http URL on this machine."""
    parts = urlsplit(server)
    host = parts.hostname or ""
    loopback = host == "localhost"
    if not loopback:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
    if parts.scheme != "http" or not loopback:
        raise ValueError(f"the load tool only targets loopback http servers, not {server!r}")


class Recorder:
    """Latencies and answers per route."""

    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.statuses: dict[str, Counter[str]] = defaultdict(Counter)

    def add(self, route: str, seconds: float, status: str) -> None:
        self.latencies[route].append(seconds)
        self.statuses[route][status] += 1

    def stats(self) -> dict[str, RouteStats]:
        out = {}
        for route, values in sorted(self.latencies.items()):
            ordered = sorted(values)

            def pct(q: float, ordered: list[float] = ordered) -> float | None:
                if not ordered:
                    return None
                return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

            out[route] = RouteStats(requests=len(values), statuses=dict(self.statuses[route]),
                                    p50_ms=pct(0.50), p95_ms=pct(0.95), p99_ms=pct(0.99),
                                    max_ms=pct(1.0))
        return out


class LoadClient:
    """An httpx.AsyncClient bounded to `concurrency` requests in flight, with the CLI's
    retry policy."""

    def __init__(self, config: LoadConfig, recorder: Recorder) -> None:
        limits = httpx.Limits(max_connections=config.concurrency,
                              max_keepalive_connections=config.concurrency)
        self.http = httpx.AsyncClient(base_url=config.server, limits=limits,
                                      timeout=config.request_timeout_s)
        self.gate = asyncio.Semaphore(config.concurrency)
        self.recorder = recorder

    async def request(self, route: str, method: str, path: str, *, token: str | None = None,
                      retry: bool = True, **kwargs: object) -> httpx.Response | None:
        """One request, retried like the CLI; None if it never got a usable answer."""
        headers = dict(kwargs.pop("headers", {}) or {})  # type: ignore[arg-type]
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if method == "POST":
            headers["Idempotency-Key"] = uuid.uuid4().hex
        deadline = time.monotonic() + RETRY_FOR_S
        delay = 0.5
        while True:
            started = time.monotonic()
            try:
                async with self.gate:
                    response = await self.http.request(method, path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                self.recorder.add(route, time.monotonic() - started, type(exc).__name__)
                connect_failed = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if retry and (method == "GET" or connect_failed) and time.monotonic() < deadline:
                    await asyncio.sleep(delay * random.uniform(0.8, 1.2))  # noqa: S311
                    delay = min(delay * 2, 15.0)
                    continue
                return None
            self.recorder.add(route, time.monotonic() - started, str(response.status_code))
            retry_after = response.headers.get("retry-after", "")
            if retry and response.status_code == 503 and time.monotonic() < deadline:
                wait = float(retry_after) if retry_after.isdigit() else delay
                await asyncio.sleep(min(wait, 60.0) * random.uniform(0.8, 1.2))  # noqa: S311
                delay = min(delay * 2, 15.0)
                continue
            return response

    async def close(self) -> None:
        await self.http.aclose()


def upload_source(student: int, upload: int) -> str:
    """Upload `upload` (0-based) of student `student`: the reference, or (odd uploads) the
    reference with the VJP's sign flipped; unique by its first line."""
    reference = REFERENCE.read_text()
    body = reference if upload % 2 == 0 else reference.replace("g - dot", "g + dot")
    return f"# load test: student {student} upload {upload}\n{body}"


def server_has_long_poll(openapi: dict) -> bool:
    """True when `GET /api/v1/submissions/{id}` declares a `wait` query parameter."""
    for path, item in openapi.get("paths", {}).items():
        if path.startswith("/api/v1/submissions/{") and path.count("/") == 4:
            parameters = item.get("get", {}).get("parameters", [])
            if any(p.get("name") == "wait" and p.get("in") == "query" for p in parameters):
                return True
    return False


# ------------------------------------------------------------------------ the run


async def run_load(config: LoadConfig, *, instructor_token: str,
                   log=print) -> LoadResult:  # noqa: ANN001 - a print-like callable
    """Create the students, upload, poll until finalised or `max_duration_s`, measure the
    recovery and the duplicates. Raises ValueError for a non-loopback server."""
    require_loopback(config.server)
    if "g - dot" not in REFERENCE.read_text():
        raise RuntimeError(f"{REFERENCE} changed: cannot derive the failing upload")
    recorder = Recorder()
    client = LoadClient(config, recorder)
    started_at = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    end = t0 + config.max_duration_s
    phases: dict[str, float] = {}
    instructor = instructor_token
    try:
        openapi = await client.request("GET /openapi.json", "GET", "/openapi.json")
        long_poll = openapi is not None and openapi.status_code == 200 and \
            server_has_long_poll(openapi.json())
        log(f"long-poll (?wait=): {'yes' if long_poll else 'no, polling as the CLI does'}")

        # 1. students
        async def create_student(index: int) -> tuple[int, str] | None:
            response = await client.request(
                "POST /api/v1/students", "POST", "/api/v1/students", token=instructor,
                json={"name": f"load student {index} {uuid.uuid4().hex[:6]}"})
            if response is None or response.status_code != 201:
                return None
            body = response.json()
            return body["id"], body["token"]

        phase = time.monotonic()
        students = await asyncio.gather(*(create_student(i) for i in range(config.students)))
        phases["create_students"] = round(time.monotonic() - phase, 2)
        created = [(i, s) for i, s in enumerate(students) if s is not None]
        log(f"students created: {len(created)}/{config.students}")

        # 2. uploads, all at once (bounded by the concurrency gate)
        acknowledged: dict[int, list[int]] = defaultdict(list)  # student id -> submission ids
        upload_answers: Counter[str] = Counter()

        async def send_upload(index: int, student: tuple[int, str], upload: int) -> None:
            student_id, token = student
            response = await client.request(
                "POST /api/v1/submissions", "POST", "/api/v1/submissions", token=token,
                files={"file": (f"kernel_{upload}.py", upload_source(index, upload).encode(),
                                "text/x-python")})
            upload_answers[str(response.status_code) if response is not None else "no answer"] += 1
            if response is not None and response.status_code == 202:
                acknowledged[student_id].append(response.json()["id"])

        phase = time.monotonic()
        first_upload = time.monotonic()
        await asyncio.gather(*(send_upload(i, s, u) for i, s in created
                               for u in range(config.uploads_per_student)))
        phases["uploads"] = round(time.monotonic() - phase, 2)
        tokens = dict(s for _i, s in created)
        accepted = sum(len(v) for v in acknowledged.values())
        log(f"uploads accepted: {accepted}/{len(created) * config.uploads_per_student} "
            f"in {phases['uploads']} s")

        # 3. polling, as the CLI does (or long-poll)
        final_status: dict[int, str] = {}

        async def poll(student_id: int, submission_id: int) -> None:
            interval = config.poll_interval_s
            path = f"/api/v1/submissions/{submission_id}"
            params = {"wait": config.long_poll_wait_s} if long_poll else None
            while time.monotonic() < end:
                response = await client.request("GET /api/v1/submissions/{id}", "GET", path,
                                                token=tokens[student_id], params=params)
                status = None
                if response is not None and response.status_code == 200:
                    status = response.json()["status"]
                    if status in TERMINAL:
                        final_status[submission_id] = status
                        return
                if long_poll and response is not None and response.status_code == 200:
                    continue
                interval = config.poll_interval_s if status == "running" else \
                    min(interval * 1.5, 10.0)
                await asyncio.sleep(min(interval, max(0.0, end - time.monotonic())))

        drain: list[DrainSample] = []
        stop_sampling = asyncio.Event()

        async def sample_drain() -> None:
            while not stop_sampling.is_set():
                response = await client.request("GET /healthz", "GET", "/healthz", retry=False)
                depth = None
                if response is not None and response.status_code in (200, 503):
                    depth = response.json().get("queue_depth")
                drain.append(DrainSample(t_s=round(time.monotonic() - first_upload, 1),
                                         finalised=len(final_status), queue_depth=depth))
                log(f"t={drain[-1].t_s:.0f}s finalised {len(final_status)}/{accepted} "
                    f"queue {depth}")
                try:
                    await asyncio.wait_for(stop_sampling.wait(), 10.0)
                except TimeoutError:
                    pass

        phase = time.monotonic()
        sampler = asyncio.create_task(sample_drain())
        await asyncio.gather(*(poll(student_id, submission_id)
                               for student_id, ids in acknowledged.items()
                               for submission_id in ids))
        stop_sampling.set()
        await sampler
        phases["polling"] = round(time.monotonic() - phase, 2)
        drain.append(DrainSample(t_s=round(time.monotonic() - first_upload, 1),
                                 finalised=len(final_status), queue_depth=None))

        # 4. recovery: both answer in < 1 s
        recovery_s = await measure_recovery(client, config, tokens, acknowledged)
        log(f"recovery: {recovery_s} s")

        # 5. duplicates, as the instructor sees the submissions
        duplicates = await count_duplicates(client, instructor, {s for s, _t in tokens.items()},
                                            acknowledged)
    finally:
        await client.close()

    routes = recorder.stats()
    statuses = Counter()
    for stats in routes.values():
        statuses.update(stats.statuses)
    rate = None
    if len(drain) >= 2 and drain[-1].t_s > drain[0].t_s:
        rate = round(60 * (drain[-1].finalised - drain[0].finalised) / (drain[-1].t_s - drain[0].t_s), 2)
    return LoadResult(
        config=config, started_at=started_at, finished_at=dt.datetime.now(dt.UTC),
        long_poll=long_poll, phases_s=phases, students_created=len(created),
        uploads_attempted=len(created) * config.uploads_per_student, uploads_accepted=accepted,
        upload_answers=dict(upload_answers), finalised=len(final_status),
        finalised_by_status=dict(Counter(final_status.values())),
        not_finalised=accepted - len(final_status), all_finalised=len(final_status) == accepted,
        server_errors_5xx=sum(n for s, n in statuses.items() if s.startswith("5")),
        server_errors_500=statuses.get("500", 0), routes=routes, drain=drain,
        drain_rate_per_min=rate, duplicates=duplicates, recovery_s=recovery_s,
    )


async def measure_recovery(client: LoadClient, config: LoadConfig, tokens: dict[int, str],
                           acknowledged: dict[int, list[int]]) -> float | None:
    """Seconds until `/healthz` and one submission GET both answer (2xx) in under 1 s."""
    probe = next(((s, ids[0]) for s, ids in acknowledged.items() if ids), None)
    started = time.monotonic()
    while time.monotonic() - started < config.recovery_limit_s:
        ok = True
        for route, path, token in (
            ("GET /healthz", "/healthz", None),
            *((("GET /api/v1/submissions/{id}", f"/api/v1/submissions/{probe[1]}",
                tokens[probe[0]]),) if probe else ()),
        ):
            t = time.monotonic()
            response = await client.request(route, "GET", path, token=token, retry=False)
            if response is None or response.status_code >= 300 or time.monotonic() - t >= 1.0:
                ok = False
        if ok:
            return round(time.monotonic() - started, 2)
        await asyncio.sleep(0.2)
    return None


def surplus_by_student(stored: dict[int, list[int]], acknowledged: dict[int, list[int]]
                       ) -> dict[int, int]:
    """Per student, stored submissions beyond the acknowledged ones (students with a
    surplus only; a student with no acknowledged upload counts all it has stored)."""
    surplus = {s: len(ids) - len(acknowledged.get(s, [])) for s, ids in stored.items()}
    return {s: n for s, n in surplus.items() if n > 0}


async def count_duplicates(client: LoadClient, instructor: str, student_ids: set[int],
                           acknowledged: dict[int, list[int]]) -> Duplicates:
    """Stored vs acknowledged submissions of the load's students (`student_ids`, the
    instructor's listing), and the sources of students with a surplus."""
    acked = sum(len(v) for v in acknowledged.values())
    stored: dict[int, list[int]] = defaultdict(list)
    offset, complete = 0, True
    while True:
        response = await client.request("GET /api/v1/submissions", "GET", "/api/v1/submissions",
                                        token=instructor, params={"limit": 500, "offset": offset})
        if response is None or response.status_code != 200:
            complete = False
            break
        page = response.json()["submissions"]
        for row in page:
            if row["student_id"] in student_ids:
                stored[row["student_id"]].append(row["id"])
        if len(page) < 500:
            break
        offset += 500
    if not complete:
        return Duplicates(submissions_on_server=None, acknowledged=acked, surplus=None,
                          students_with_surplus=[], same_content_twice=None)
    surplus = surplus_by_student(stored, acknowledged)
    surplus_students = sorted(surplus)
    same_content = 0
    for student_id in surplus_students:
        seen: set[str] = set()
        for submission_id in stored[student_id]:
            response = await client.request("GET /api/v1/submissions/{id}/source", "GET",
                                            f"/api/v1/submissions/{submission_id}/source",
                                            token=instructor)
            text = response.text if response is not None else str(submission_id)
            same_content += text in seen
            seen.add(text)
    return Duplicates(
        submissions_on_server=sum(len(v) for v in stored.values()), acknowledged=acked,
        surplus=sum(surplus.values()), students_with_surplus=surplus_students,
        same_content_twice=same_content)


def main(argv: list[str] | None = None) -> int:
    """Command line: run the load and write the `LoadResult` JSON (to --out or stdout)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="http://127.0.0.1:8000")
    parser.add_argument("--instructor-token", required=True)
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--uploads-per-student", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--max-duration", type=float, default=1500.0, help="seconds")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    config = LoadConfig(server=args.server, students=args.students,
                        uploads_per_student=args.uploads_per_student,
                        concurrency=args.concurrency, poll_interval_s=args.poll_interval,
                        max_duration_s=args.max_duration)
    result = asyncio.run(run_load(config, instructor_token=args.instructor_token,
                                  log=lambda line: print(line, file=sys.stderr, flush=True)))
    text = json.dumps(result.model_dump(mode="json"), indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 0 if result.all_finalised and result.server_errors_500 == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
