"""The scheduled LMS sync runs in one process of all that serve the API
(submissions/lti/sync.py, `LtiSyncLoop` and its ``lti_sync`` lease), on both databases:

- two real processes run the loop against one database: only one of them syncs the rounds;
  killed (SIGKILL: no clean stop), it stops renewing and the other takes over once the
  lease has expired, not before;
- a loop that stops cleanly releases the lease, and another loop takes over at its next tick;
- one run at a time, scheduled or on demand (the ``lti_sync_run`` lease): "Sync now" while
  another run holds it is a 409, a scheduled round waits for the next tick, and a run longer
  than its lease keeps it.

The rounds themselves are replaced by a note of who ran one and when (what a round does is
tested in test_roster.py and test_grades.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from submissions import repository
from submissions.lti import sync
from submissions.lti.sync import LtiSyncLoop
from submissions.models import utc_now

from ..helpers import instructor_headers, wait_until

REPOSITORY_ROOT = Path(__file__).resolve().parents[3]
INTERVAL_S = 0.2
LEASE_S = 2.0

CHILD = """
import sys, time
from submissions.db import create_db_engine, create_session_factory
from submissions.lti import sync
from submissions.settings import Settings

url, holder, notes, interval_s, lease_s = sys.argv[1:6]

def note_a_round(session_factory, **kwargs):
    with open(notes, "a") as out:
        out.write(f"{holder} {time.time()}\\n")

sync.run_sync = note_a_round
settings = Settings(_env_file=None, database_url=url, lti_sync_interval_s=float(interval_s))
loop = sync.LtiSyncLoop(create_session_factory(create_db_engine(url)), settings, holder=holder,
                        lease_s=float(lease_s))
loop.start()
time.sleep(600)
"""


def _rounds(notes: Path) -> list[tuple[str, float]]:
    if not notes.exists():
        return []
    return [(holder, float(at)) for holder, at in
            (line.split() for line in notes.read_text().splitlines() if line.strip())]


def _start(url: str, holder: str, notes: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY_ROOT)}
    return subprocess.Popen([sys.executable, "-c", CHILD, url, holder, str(notes),
                             str(INTERVAL_S), str(LEASE_S)], env=env, cwd=REPOSITORY_ROOT)


def test_two_processes_sync_each_round_once_and_the_survivor_takes_over(committed_db,
                                                                        tmp_path: Path) -> None:
    notes = tmp_path / "rounds.txt"
    processes = {name: _start(committed_db.url, name, notes) for name in ("p1", "p2")}
    try:
        wait_until(lambda: len(_rounds(notes)) >= 10, timeout=60, message="ten rounds")
        holders = {holder for holder, _ in _rounds(notes)}
        assert len(holders) == 1, _rounds(notes)  # one process ran every round
        [holder] = holders
        [other] = set(processes) - holders
        assert processes[other].poll() is None  # alive, ticking, not syncing

        processes[holder].send_signal(signal.SIGKILL)
        processes[holder].wait(10)
        last_of_holder = max(at for who, at in _rounds(notes) if who == holder)
        wait_until(lambda: any(who == other for who, _ in _rounds(notes)), timeout=30,
                   message="the other process to take over")
        first_of_other = min(at for who, at in _rounds(notes) if who == other)
        # Not before the dead holder's lease (renewed after its last round) expired.
        assert first_of_other - last_of_holder >= LEASE_S - 0.05
        wait_until(lambda: sum(who == other for who, _ in _rounds(notes)) >= 3, timeout=30,
                   message="the new holder's rounds")
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)


@pytest.mark.parametrize("wait_s", [None, 20.0])
def test_a_loop_that_stops_releases_the_lease_to_the_next(committed_db, wait_s: float | None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether stop() waits for a round under way (`grader serve` does) or not."""
    monkeypatch.setattr(sync, "run_sync", lambda _factory, **kwargs: None)
    settings = committed_db.settings(lti_sync_interval_s=INTERVAL_S)
    long_lease_s = 300.0  # a takeover within seconds can only come from the release
    first, second = (LtiSyncLoop(committed_db.session_factory, settings, holder=name,
                                 lease_s=long_lease_s) for name in ("first", "second"))
    first.start()
    try:
        wait_until(lambda: first.rounds >= 2, timeout=20, message="the first loop's rounds")
        second.start()
        time.sleep(10 * INTERVAL_S)
        assert second.rounds == 0
        first.stop(timeout_s=wait_s)
        wait_until(lambda: not first._thread.is_alive(), timeout=20, message="the first loop")
        ran = first.rounds
        wait_until(lambda: second.rounds >= 2, timeout=20, message="the second loop's rounds")
        assert first.rounds == ran
    finally:
        first.stop(timeout_s=20)
        second.stop(timeout_s=20)


# ------------------------------------------------- one run at a time: the run lease


def _take_run_lease(session_factory, holder: str, ttl_s: float = 300.0) -> bool:
    with session_factory() as session:
        taken = repository.take_lease(session, name=sync.RUN_LEASE, holder=holder, ttl_s=ttl_s,
                                      now=utc_now())
        session.commit()
    return taken


def test_an_on_demand_sync_is_refused_while_another_run_holds_the_run_lease(
        client: TestClient, db_session) -> None:
    """Two runs would each find-or-create an assignment's line item at once: "Sync now"
    (the API, the page) while a scheduled round of another process runs is a 409, not a
    second run beside it."""
    assert repository.take_lease(db_session, name=sync.RUN_LEASE, holder="another process",
                                 ttl_s=300.0, now=utc_now())
    db_session.commit()
    refused = client.post("/api/v1/lti/sync", headers=instructor_headers())
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "lti_sync_running", refused.text
    assert "running now (since" in refused.json()["error"]["message"]
    assert repository.release_lease(db_session, name=sync.RUN_LEASE, holder="another process",
                                    now=utc_now())
    db_session.commit()
    assert client.post("/api/v1/lti/sync", headers=instructor_headers()).status_code == 200
    assert _take_run_lease(lambda: db_session, "the next run"), "a finished run releases the lease"


def test_a_scheduled_round_waits_for_a_run_under_way(committed_db,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync, "run_sync", lambda _factory, **kwargs: None)
    loop = LtiSyncLoop(committed_db.session_factory, committed_db.settings(lti_sync_interval_s=60.0),
                       holder="scheduler")
    assert _take_run_lease(committed_db.session_factory, "Sync now, in another process")
    assert loop.run_round() is False and loop.rounds == 0
    with committed_db.session_factory() as session:
        repository.release_lease(session, name=sync.RUN_LEASE, holder="Sync now, in another process",
                                 now=utc_now())
        session.commit()
    assert loop.run_round() is True and loop.rounds == 1
    loop.stop(timeout_s=20)


def test_a_long_run_keeps_its_lease_and_frees_it_at_the_end(committed_db,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A run longer than its lease renews it (every third of it), so no other run starts
    beside it; at its end the lease is free at once."""
    lease_s, seen = 4.0, []

    def slow_run(session_factory, **kwargs):
        time.sleep(lease_s * 1.5)
        seen.append(_take_run_lease(session_factory, "another run"))
        return sync.SyncRun()

    monkeypatch.setattr(sync, "run_sync", slow_run)
    settings = committed_db.settings()
    sync.run_sync_exclusive(committed_db.session_factory, settings=settings, now=utc_now(),
                            holder="a long run", lease_s=lease_s)
    assert seen == [False]
    assert _take_run_lease(committed_db.session_factory, "another run")
