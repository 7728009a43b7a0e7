"""Admission by queueing delay against a real `grader serve` (issue 38), on SQLite and on
PostgreSQL: bursts of reads and long-polls on an idle server are queued, not refused; a
burst beyond what the server can answer within its target delay is refused with 503 +
Retry-After, each request answered or refused within a bound; with a slowed database the
503s appear and the server stays responsive; a database outage ends the long-polls at once.

The bursts are scripts/admission_load.py's (which records the figures under
docs/reliability/). The bounds here are generous on purpose: CI runs this on a loaded 2-core
machine, where the load generator shares the cores with the server. The figures measured
with the default settings are in docs/reliability.md, "Admission by queueing delay"; each
test prints its own as a ``FIGURES`` line.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sqlite3
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from ..helpers import INSTRUCTOR_TOKEN
from ..tcp_proxy import CuttableProxy
from .test_edge import serve

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "admission_load.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("admission_load", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["admission_load"] = module
    spec.loader.exec_module(module)
    return module


load = _load_script()


def _figures(name: str, backend: str, **figures: object) -> None:
    print(f"\nFIGURES {name} {backend} " + json.dumps(figures, default=str))


def test_bursts_on_an_idle_server_are_queued_not_refused(committed_db, tmp_path) -> None:
    """120 concurrent reads and 100 simultaneous long-polls: every one answered 200 (issue
    38: 98 x 503 and 77 x 503 with 22 places, whatever the machine). The queue's target is
    raised to 10 s here, so that a loaded CI machine's slowness is not mistaken for a
    failure (at load average 10 on two cores these 120 reads took up to 3.3 s); with the
    default 1.5 s the figures of docs/reliability.md were measured."""
    with serve(committed_db.url, tmp_path, api_queue_target_s="10") as served:
        token, path = load.create_student_and_upload(served.base_url, INSTRUCTOR_TOKEN)
        reads = load.summarise(asyncio.run(load.burst(served.base_url, path, token, 120)))
        polls = load.summarise(asyncio.run(
            load.burst(served.base_url, f"{path}?wait=2", token, 100, timeout_s=60)))
    _figures("idle_bursts", committed_db.backend, reads_120=reads.model_dump(),
             long_polls_100=polls.model_dump())
    assert reads.answers == {"200": 120}, reads
    assert reads.ok_p99_s is not None and reads.ok_p99_s < 12.0, reads  # measured: 0.9-3.3 s
    assert polls.answers == {"200": 100}, polls


def test_a_burst_beyond_the_target_is_refused_with_retry_after_within_a_bound(
        committed_db, tmp_path) -> None:
    """300 concurrent reads with the default settings (22 places, 1.5 s target): more are
    answered than there are places (they waited in the queue), the rest are refused with
    503 + Retry-After, from the queue (its measured drain rate said they would wait too
    long, or they waited their allowance; never for a full queue), and every request is
    answered or refused within a bound (measured: under 2 s)."""
    with serve(committed_db.url, tmp_path) as served:
        token, path = load.create_student_and_upload(served.base_url, INSTRUCTOR_TOKEN)
        answers = asyncio.run(load.burst(served.base_url, path, token, 300))
        after = httpx.get(f"{served.base_url}{path}", timeout=10,
                          headers={"Authorization": f"Bearer {token}"})
        series = load.admission_series(served.base_url)
    summary = load.summarise(answers)
    refused = {reason: series[f'grader_api_requests_refused_total{{reason="{reason}"}}']
               for reason in ("queue_full", "waited_too_long", "predicted_too_long")}
    _figures("reads_300", committed_db.backend, **summary.model_dump(), server_refused=refused)
    assert set(summary.answers) <= {"200", "503"}, summary
    assert summary.answers.get("200", 0) > 22, summary  # more than the places: queued
    assert summary.every_503_has_retry_after and set(summary.codes_503) <= {"overloaded"}
    # Every 503 came from the wait in the queue (predicted or timed out), none for a full queue.
    assert refused["queue_full"] == 0, refused
    assert refused["waited_too_long"] + refused["predicted_too_long"] == \
        summary.answers.get("503", 0), (refused, summary)
    assert summary.all_max_s < 12.0, summary  # generous; measured: 1.7-4.7 s (loaded)
    assert after.status_code == 200


@pytest.mark.parametrize("database_server", ["postgres"], indirect=True)
def test_a_slowed_database_brings_503_with_retry_after_and_the_server_stays_responsive(
        committed_db, tmp_path) -> None:
    """The API reaches PostgreSQL through a proxy that holds every chunk 40 ms each way (a
    read alone then takes about a second): a burst of 300 reads gets 503 + Retry-After for
    what cannot be answered in time, every request is answered within a bound, /healthz
    answers meanwhile, and once the delay ends a read is fast again."""
    proxy = CuttableProxy.for_database(committed_db.url)
    try:
        with serve(proxy.url_for(committed_db.url), tmp_path) as served:
            token, path = load.create_student_and_upload(served.base_url, INSTRUCTOR_TOKEN)
            proxy.delay_s = 0.04

            async def scenario() -> tuple[list, object]:
                reads = asyncio.ensure_future(load.burst(served.base_url, path, token, 300))
                await asyncio.sleep(1.0)
                health = await load.burst(served.base_url, "/healthz", None, 1)
                return await reads, health[0]

            answers, health = asyncio.run(scenario())
            proxy.delay_s = 0.0
            started = time.monotonic()
            after = httpx.get(f"{served.base_url}{path}", timeout=10,
                              headers={"Authorization": f"Bearer {token}"})
            after_s = time.monotonic() - started
    finally:
        proxy.close()
    summary = load.summarise(answers)
    _figures("slowed_database", committed_db.backend, reads_300=summary.model_dump(),
             healthz=[health.status, round(health.seconds, 3)], read_after_s=round(after_s, 3))
    assert set(summary.answers) <= {"200", "503"}, summary
    assert summary.answers.get("503", 0) > 0 and summary.every_503_has_retry_after, summary
    assert summary.answers.get("200", 0) > 0, summary
    assert summary.all_max_s < 15.0, summary  # generous; measured: 3.0-3.7 s
    assert health.status == 200 and health.seconds < 8.0, health  # measured: 0.6-1.7 s
    assert after.status_code == 200 and after_s < 3.0, after_s


def test_a_database_outage_ends_the_long_polls_at_once_with_retry_after(
        committed_db, tmp_path) -> None:
    """20 long-polls (``?wait=30``) wait; the database becomes unreachable (PostgreSQL: the
    proxy is cut; SQLite: another process holds the write lock beyond the busy timeout):
    each answers 503 ``database_unavailable`` with Retry-After within seconds, not after
    its 30 s (issue 38). /healthz's 503 carries Retry-After too."""
    proxy = CuttableProxy.for_database(committed_db.url) \
        if committed_db.backend == "postgres" else None
    url = proxy.url_for(committed_db.url) if proxy else committed_db.url
    lock: sqlite3.Connection | None = None
    try:
        with serve(url, tmp_path, sqlite_busy_timeout_s="1", db_pool_timeout_s="2") as served:
            token, path = load.create_student_and_upload(served.base_url, INSTRUCTOR_TOKEN)

            async def scenario() -> tuple[list, float]:
                polls = asyncio.ensure_future(load.burst(served.base_url, f"{path}?wait=30",
                                                         token, 20, timeout_s=60))
                await asyncio.sleep(2.0)  # every long-poll has read its submission and waits
                assert not polls.done()
                cut_at = time.monotonic()
                await asyncio.to_thread(cut)
                return await polls, cut_at

            def cut() -> None:
                nonlocal lock
                if proxy is not None:
                    proxy.cut()
                else:
                    lock = sqlite3.connect(make_url(url).database, isolation_level=None,
                                           check_same_thread=False)
                    lock.execute("BEGIN EXCLUSIVE")

            answers, cut_at = asyncio.run(scenario())
            health = httpx.get(f"{served.base_url}/healthz", timeout=30)
            if lock is not None:
                lock.execute("ROLLBACK")
                lock.close()
                lock = None
            if proxy is not None:
                proxy.restore()
    finally:
        if lock is not None:
            lock.close()
        if proxy is not None:
            proxy.close()
    after_cut = [round(a.ended - cut_at, 3) for a in answers]
    summary = load.summarise(answers)
    _figures("outage_long_polls", committed_db.backend, answers=summary.answers,
             answered_after_the_cut_s=[min(after_cut), max(after_cut)])
    assert summary.answers == {"503": 20}, summary
    assert summary.codes_503 == {"database_unavailable": 20} and summary.every_503_has_retry_after
    assert max(after_cut) < 10.0, after_cut  # not the 30 s wait; measured: 0.1-0.3 s (PostgreSQL)
    assert health.status_code == 503 and health.headers["retry-after"].isdigit()


def test_the_load_script_targets_loopback_only_and_summarises_by_nearest_rank() -> None:
    for server in ("http://10.0.0.5:8000", "http://example.org", "https://127.0.0.1:8000"):
        with pytest.raises(ValueError):
            asyncio.run(load.burst(server, "/healthz", None, 1))
    with pytest.raises(ValueError):
        asyncio.run(load.burst("http://127.0.0.1:9", "/healthz", None, load.MAX_BURST + 1))
    answers = [load.Answer(200, None, None, seconds / 100, 0.0) for seconds in range(1, 101)]
    answers += [load.Answer(503, "overloaded", "1", 1.5, 0.0),
                load.Answer(503, "overloaded", None, 0.7, 0.0)]
    summary = load.summarise(answers)
    assert summary.answers == {"200": 100, "503": 2} and summary.codes_503 == {"overloaded": 2}
    assert summary.ok_p50_s == 0.505 and summary.ok_p99_s == 0.99 and summary.ok_max_s == 1.0
    assert summary.all_max_s == 1.5 and summary.refused_max_s == 1.5
    assert summary.every_503_has_retry_after is False  # one 503 came without it
