"""Named leases (``leases``): at most one holder per name at a time, across processes and
hosts sharing the database. The scheduled LMS sync takes ``lti_sync`` (submissions/lti/
sync.py), so that one API process, of however many, runs each round.

Concurrency (the queue's claim pattern, submissions/repository/queue.py, on one row per name):

- `take_lease` is one conditional UPDATE, ``SET holder = :me, expires_at = :now + ttl WHERE
  name = :name AND (holder = :me OR expires_at <= :now)``; its row count says whether the
  caller now holds the lease. On PostgreSQL (READ COMMITTED) a second UPDATE of the row waits
  for the first transaction, then evaluates its WHERE again on the row that one committed:
  the new holder's unexpired lease does not match, so two takers never both win. On SQLite
  every transaction holds the write lock from its BEGIN IMMEDIATE (submissions/db.py), so
  takers run one after another.
- The first take of a name finds no row and INSERTs one in a savepoint: the primary key lets
  one of several concurrent inserters win (PostgreSQL makes the others wait on the index
  entry, then fail); a loser's IntegrityError means another holds it.
- Renewing is the same call by the holder. A holder whose lease expired and was taken
  matches no row: it learns that it lost the lease. `release_lease` ends a held lease early
  (a clean stop), conditional on the holder.

The caller commits at once (a lease counts from a visible state) and never holds the
transaction open while it works. Times are the caller's aware UTC datetimes; hosts are
assumed to have synchronised clocks (NTP), as for the queue's leases, and a lease is far
longer than any skew.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from sqlalchemy import CursorResult, Result, case, literal, or_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from submissions.models import Lease, UTCDateTime

__all__ = ["get_lease", "release_lease", "take_lease"]


def take_lease(session: Session, *, name: str, holder: str, ttl_s: float,
               now: dt.datetime) -> bool:
    """Take lease `name` for `holder` until ``now + ttl_s``, or renew it when `holder` has
    it. Returns whether `holder` holds it now: False while another unexpired holder has it.
    Safe with any number of concurrent callers (module docstring)."""
    expires_at = now + dt.timedelta(seconds=ttl_s)
    taken = _rows_updated(session.execute(
        update(Lease)
        .where(Lease.name == name, or_(Lease.holder == holder, Lease.expires_at <= now))
        .values(holder=holder, expires_at=expires_at,
                acquired_at=case((Lease.holder == holder, Lease.acquired_at),
                                 else_=literal(now, UTCDateTime())))
        .execution_options(synchronize_session=False)
    ))
    if taken:
        return True
    try:
        with session.begin_nested():
            session.add(Lease(name=name, holder=holder, acquired_at=now, expires_at=expires_at))
    except IntegrityError:
        return False
    return True


def release_lease(session: Session, *, name: str, holder: str, now: dt.datetime) -> bool:
    """End `holder`'s lease `name` now (another may take it at once). False when `holder`
    did not hold it."""
    return bool(_rows_updated(session.execute(
        update(Lease)
        .where(Lease.name == name, Lease.holder == holder, Lease.expires_at > now)
        .values(expires_at=now)
        .execution_options(synchronize_session=False)
    )))


def _rows_updated(result: Result[Any]) -> int:
    """The row count of an UPDATE's result (a ``CursorResult``; ``Session.execute`` is typed
    with the general ``Result``)."""
    return cast(CursorResult[Any], result).rowcount


def get_lease(session: Session, *, name: str) -> Lease | None:
    """The lease row of `name` (its holder, who may have let it expire), or None."""
    return session.get(Lease, name, populate_existing=True)
