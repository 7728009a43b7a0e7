"""submissions/repository/leases.py on both databases, with committed data: one holder at a
time; the holder renews; an expired lease goes to the next taker and the old holder learns it
lost it; a released lease is free at once; concurrent takers in their own sessions (threads:
PostgreSQL runs them at once) leave exactly one holder, on a new row and on an expired one."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from submissions import repository

T0 = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)


def _take(committed_db, holder: str, now: dt.datetime, ttl_s: float = 60.0) -> bool:
    with committed_db.session_factory.begin() as session:
        return repository.take_lease(session, name="job", holder=holder, ttl_s=ttl_s, now=now)


def _holder(committed_db) -> tuple[str, dt.datetime, dt.datetime] | None:
    with committed_db.session_factory() as session:
        row = repository.get_lease(session, name="job")
        return None if row is None else (row.holder, row.acquired_at, row.expires_at)


def test_one_holder_until_its_lease_expires_then_the_next_taker(committed_db) -> None:
    assert _take(committed_db, "a", T0)
    assert not _take(committed_db, "b", T0 + dt.timedelta(seconds=1))
    assert _take(committed_db, "a", T0 + dt.timedelta(seconds=50))  # a renews: until 110 s
    assert _holder(committed_db) == ("a", T0, T0 + dt.timedelta(seconds=110))
    assert not _take(committed_db, "b", T0 + dt.timedelta(seconds=100))  # a's first lease's end
    later = T0 + dt.timedelta(seconds=110)
    assert _take(committed_db, "b", later)  # expired: b takes it
    assert _holder(committed_db) == ("b", later, later + dt.timedelta(seconds=60))
    assert not _take(committed_db, "a", later + dt.timedelta(seconds=1))  # a lost it


def test_a_released_lease_is_free_at_once(committed_db) -> None:
    assert _take(committed_db, "a", T0)
    with committed_db.session_factory.begin() as session:
        assert not repository.release_lease(session, name="job", holder="b", now=T0)
        assert repository.release_lease(session, name="job", holder="a", now=T0)
    assert _take(committed_db, "b", T0 + dt.timedelta(seconds=1))


@pytest.mark.parametrize("existing", ["no row", "an expired row"])
def test_concurrent_takers_leave_exactly_one_holder(committed_db, existing: str) -> None:
    if existing == "an expired row":
        assert _take(committed_db, "old", T0 - dt.timedelta(seconds=120))
    takers = 6
    start = threading.Barrier(takers)
    won: list[str] = []
    errors: list[BaseException] = []

    def taker(holder: str) -> None:
        try:
            with committed_db.session_factory() as session:
                start.wait(timeout=30)
                if repository.take_lease(session, name="job", holder=holder, ttl_s=60.0,
                                         now=T0):
                    won.append(holder)
                session.commit()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=taker, args=(f"p{i}",)) for i in range(takers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len(won) == 1, won
    assert _holder(committed_db)[0] == won[0]
