"""Admission by queueing delay, measured: bursts of reads and long-polls on an idle
`grader serve` on PostgreSQL, then the same with a slowed database and through an outage.

    PYTHONPATH=. .venv/bin/python scripts/admission_load.py            # recorded
    PYTHONPATH=. .venv/bin/python scripts/admission_load.py --rounds 1 # a quick look

The stack: a fresh PostgreSQL database ``admission_<stamp>`` on the server named by
``GRADER_TEST_POSTGRES_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``),
reached by the API through a TCP proxy that can be slowed and cut (tests/service/tcp_proxy.py);
`grader serve --workers-embedded 0` with default settings (no grading: the server is idle but
for the load); one student and one queued upload, whose status every request reads. Phases,
each a fixed number of requests sent at once from this process (httpx, one connection
each, no retry), on loopback only:

1. ``reads_120``: `--rounds` rounds of 120 concurrent ``GET /api/v1/submissions/{id}``;
2. ``long_polls_100``: 100 simultaneous ``?wait=`` long-polls, and 1 s later 120 reads;
3. ``reads_300``: `--rounds` rounds of 300 concurrent reads; and, as the floor of what 300
   connections at once cost this client and the server's event loop on this machine (no
   admission, no database, no thread), ``static_300``: 300 concurrent GETs of a static file;
4. ``slowed_database``: the proxy holds every chunk `--delay-ms` each way, then 300
   concurrent reads and a `/healthz`; then the delay is removed and one read is timed;
5. ``outage_long_polls``: 20 long-polls wait, the proxy is cut: how long until each answers.

After the 120-read, the 300-read and the slowed bursts it keeps the server's own admission
series from /metrics (cumulative: the longest wait in the queue, refusals by reason).
It writes one JSON file (`AdmissionRun`: date, machine, versions, settings, command line,
phases with status counts, Retry-After on every 503, latency percentiles) under
docs/reliability/ and prints its path. The database is dropped afterwards. The burst helpers
are shared with tests/service/api/test_admission_load.py, which asserts the issue's bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic import BaseModel

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPOSITORY_ROOT), str(REPOSITORY_ROOT / "scripts")]

#: Requests of one burst at most (the tool's own bound).
MAX_BURST = 1000


@dataclass(frozen=True)
class Answer:
    """One request's outcome: HTTP status (0: no answer), the error code, Retry-After, the
    seconds from sending to the answer's end, and that end (``time.monotonic()``)."""

    status: int
    code: str | None
    retry_after: str | None
    seconds: float
    ended: float


class Summary(BaseModel):
    """A burst in figures: answers by status, whether every 503 carried Retry-After, and the
    latencies (seconds) of the 200s and of every answer."""

    requests: int
    answers: dict[str, int]
    codes_503: dict[str, int]
    every_503_has_retry_after: bool
    ok_p50_s: float | None
    ok_p99_s: float | None
    ok_max_s: float | None
    all_max_s: float
    refused_max_s: float | None


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))], 3)


def summarise(answers: list[Answer]) -> Summary:
    """The figures of one burst (percentiles by nearest rank)."""
    ok = [a.seconds for a in answers if a.status == 200]
    refused = [a for a in answers if a.status == 503]
    return Summary(
        requests=len(answers),
        answers={str(k): v for k, v in sorted(Counter(a.status for a in answers).items())},
        codes_503=dict(Counter(a.code or "?" for a in refused)),
        every_503_has_retry_after=all(a.retry_after and a.retry_after.isdigit() for a in refused),
        ok_p50_s=round(statistics.median(ok), 3) if ok else None,
        ok_p99_s=_percentile(ok, 0.99), ok_max_s=round(max(ok), 3) if ok else None,
        all_max_s=round(max(a.seconds for a in answers), 3),
        refused_max_s=round(max(a.seconds for a in refused), 3) if refused else None)


async def burst(base_url: str, path: str, token: str | None, count: int, *,
                timeout_s: float = 90.0) -> list[Answer]:
    """`count` (<= MAX_BURST) GETs of `path` sent at once, one fresh connection each, no
    retry. Raises ValueError for a server that is not on loopback."""
    from loadtest import require_loopback

    require_loopback(base_url)
    if not 0 < count <= MAX_BURST:
        raise ValueError(f"count must be 1 to {MAX_BURST}")
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=0)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout_s,
                                 headers=headers) as http:
        async def one() -> Answer:
            started = time.monotonic()
            try:
                response = await http.get(path)
            except httpx.HTTPError:
                ended = time.monotonic()
                return Answer(0, None, None, ended - started, ended)
            code = None
            if response.status_code >= 400:
                try:
                    code = response.json().get("error", {}).get("code")
                except (ValueError, AttributeError):
                    code = None
            ended = time.monotonic()
            return Answer(response.status_code, code, response.headers.get("retry-after"),
                          ended - started, ended)

        return list(await asyncio.gather(*(one() for _ in range(count))))


async def long_polls_with_reads(base_url: str, path: str, token: str, polls: int, reads: int,
                                wait_s: int) -> tuple[list[Answer], list[Answer]]:
    """`polls` long-polls (``?wait=wait_s``) sent at once and, 1 s later, `reads` plain
    reads: (the long-polls' answers, the reads' answers)."""
    waiting = asyncio.ensure_future(burst(base_url, f"{path}?wait={wait_s}", token, polls,
                                          timeout_s=wait_s + 60))
    await asyncio.sleep(1.0)
    read_answers = await burst(base_url, path, token, reads)
    return await waiting, read_answers


def admission_series(base_url: str) -> dict[str, float]:
    """This API process's admission as its /metrics says (``grader_api_...``: places held,
    queued, admitted after a wait, the longest wait, refusals by reason; cumulative)."""
    from loadtest import require_loopback

    require_loopback(base_url)
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    series = {}
    for line in text.splitlines():
        if line.startswith("grader_api_"):
            name, _, value = line.rpartition(" ")
            series[name] = float(value)
    return series


def create_student_and_upload(base_url: str, instructor_token: str) -> tuple[str, str]:
    """One student and one upload (queued: nobody grades it): (the student's token, the
    submission's path)."""
    from loadtest import require_loopback

    require_loopback(base_url)
    source = (REPOSITORY_ROOT / "grader" / "assignments" / "softmax_backward" / "template.py")
    student = httpx.post(f"{base_url}/api/v1/students", json={"name": "admission-load"},
                         headers={"Authorization": f"Bearer {instructor_token}"}, timeout=30)
    student.raise_for_status()
    token = student.json()["token"]
    created = httpx.post(f"{base_url}/api/v1/submissions", timeout=30,
                         headers={"Authorization": f"Bearer {token}"},
                         files={"file": ("softmax_backward.py", source.read_bytes())})
    created.raise_for_status()
    return token, f"/api/v1/submissions/{created.json()['id']}"


class AdmissionRun(BaseModel):
    """What scripts/admission_load.py records (docs/reliability.md, "Admission by queueing
    delay")."""

    started_at: str
    finished_at: str
    command: str
    machine: dict[str, object]
    versions: dict[str, str | None]
    settings: dict[str, object]
    phases: dict[str, object]


def main(argv: list[str] | None = None) -> int:
    """Run the phases against a fresh stack; write the `AdmissionRun` JSON; print its path."""
    from load_stack import INSTRUCTOR_TOKEN, OUTPUT_DIR, Stack, _free_port, machine, versions
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from submissions.settings import Settings
    from tests.service.tcp_proxy import CuttableProxy

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, choices=range(1, 11), metavar="1..10")
    parser.add_argument("--long-poll-wait", type=int, default=10, choices=range(2, 61),
                        metavar="2..60", help="seconds each long-poll of phase 2 waits")
    parser.add_argument("--delay-ms", type=float, default=40.0,
                        help="phase 4: the proxy holds each chunk this long, each way")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting of the API (GRADER_NAME), e.g. api_threads=8")
    parser.add_argument("--out-dir", type=Path, default=OUTPUT_DIR)
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)

    admin_url = os.environ.get("GRADER_TEST_POSTGRES_URL",
                               "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    defaults = Settings(database_url=admin_url, **overrides)
    settings = {key: getattr(defaults, key, None) for key in (  # None: not in this version
        "api_threads", "api_health_reserve", "api_max_in_flight", "api_queue_target_s",
        "api_queue_saturated_wait_s", "api_max_queued", "api_max_waiting", "api_retry_after_s",
        "long_poll_interval_s", "db_pool_timeout_s")}
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    name = f"admission_{stamp.lower()}"
    database_url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    direct = create_engine(database_url)
    proxy = CuttableProxy.for_database(database_url)
    workdir = Path(tempfile.mkdtemp(prefix=f"admission-{stamp}-"))  # the API's log stays
    stack = Stack(proxy.url_for(database_url), workdir, _free_port(), "cpu")
    stack.env.update({f"GRADER_{key.upper()}": value for key, value in overrides.items()})
    phases: dict[str, object] = {}

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:  # from here on the database is dropped whatever happens
        started = dt.datetime.now(dt.UTC)
        meta_machine, meta_versions = machine(), versions(direct)
        log(f"stack in {workdir}; database {name}; API {stack.base_url}")
        stack.start_api()
        base = stack.base_url
        token, path = create_student_and_upload(base, INSTRUCTOR_TOKEN)

        def run(coroutine):  # noqa: ANN001, ANN202 - one phase's coroutine
            return asyncio.run(coroutine)

        phases["reads_120"] = [summarise(run(burst(base, path, token, 120))).model_dump()
                               for _ in range(args.rounds)]
        phases["server_after_reads_120"] = admission_series(base)
        log(f"reads_120: {phases['reads_120']}")
        polls, reads = run(long_polls_with_reads(base, path, token, 100, 120, args.long_poll_wait))
        phases["long_polls_100"] = {"wait_s": args.long_poll_wait,
                                    "long_polls": summarise(polls).model_dump(),
                                    "reads_120_meanwhile": summarise(reads).model_dump()}
        log(f"long_polls_100: {phases['long_polls_100']}")
        phases["reads_300"] = [summarise(run(burst(base, path, token, 300))).model_dump()
                               for _ in range(args.rounds)]
        phases["server_after_reads_300"] = admission_series(base)
        log(f"reads_300: {phases['reads_300']}")
        phases["static_300"] = [summarise(run(burst(base, "/static/pages.css", None, 300)))
                                .model_dump() for _ in range(args.rounds)]
        log(f"static_300: {phases['static_300']}")

        proxy.delay_s = args.delay_ms / 1000
        alone = run(burst(base, path, token, 1))[0].seconds
        slowed = summarise(run(burst(base, path, token, 300))).model_dump()
        health = run(burst(base, "/healthz", None, 1))[0]
        proxy.delay_s = 0.0
        time.sleep(1.0)
        after = run(burst(base, path, token, 1))[0]
        phases["server_after_slowed_database"] = admission_series(base)
        phases["slowed_database"] = {
            "delay_ms_each_way": args.delay_ms, "one_read_alone_s": round(alone, 3),
            "reads_300": slowed, "healthz_during": {"status": health.status,
                                                    "seconds": round(health.seconds, 3)},
            "one_read_after_s": round(after.seconds, 3), "one_read_after_status": after.status}
        log(f"slowed_database: {phases['slowed_database']}")

        async def outage() -> tuple[list[Answer], float]:
            waiting = asyncio.ensure_future(burst(base, f"{path}?wait=30", token, 20,
                                                  timeout_s=60))
            await asyncio.sleep(2.0)  # every long-poll has read its submission and waits
            cut_at = time.monotonic()
            await asyncio.to_thread(proxy.cut)
            return await waiting, cut_at

        outage_answers, cut_at = run(outage())
        proxy.restore()
        after_cut = [answer.ended - cut_at for answer in outage_answers]
        phases["outage_long_polls"] = {
            "long_polls": 20, "wait_s": 30, "cut_after_s": 2.0,
            "answers": summarise(outage_answers).model_dump(),
            "answered_after_the_cut_s": {"min": round(min(after_cut), 3),
                                         "max": round(max(after_cut), 3)}}
        log(f"outage_long_polls: {phases['outage_long_polls']}")
    finally:
        proxy.delay_s = 0.0
        stack.stop_all()
        proxy.close()
        direct.dispose()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    run_record = AdmissionRun(
        started_at=started.isoformat(timespec="seconds"),
        finished_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        command=shlex.join([sys.executable, *sys.argv]), machine=meta_machine,
        versions=meta_versions, settings=settings, phases=phases)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"admission-{stamp}.json"
    out.write_text(json.dumps(run_record.model_dump(), indent=2) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
