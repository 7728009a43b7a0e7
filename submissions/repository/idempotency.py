"""Idempotency keys: the stored first answers of keyed POSTs (submissions/idempotency.py).

Concurrency: a key is claimed by inserting its row (unique on scope and key hash) inside the
request's transaction, before the work. On PostgreSQL a second transaction inserting the same
key waits on the first's uncommitted row, then fails with a unique violation once it commits
(and succeeds if it rolled back); the caller then reads the committed answer. On SQLite every
transaction begins IMMEDIATE (submissions/db.py), so the second one starts after the first
has committed and finds the row at once.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from submissions.models import IdempotencyKey

__all__ = [
    "delete_expired_idempotency_keys",
    "delete_idempotency_key",
    "find_idempotency_key",
    "insert_idempotency_key",
    "store_idempotent_answer",
]


def find_idempotency_key(session: Session, *, scope: str, key_sha256: str
                         ) -> IdempotencyKey | None:
    """The row of `key_sha256` in `scope`, or None (expired rows included)."""
    return session.scalars(
        select(IdempotencyKey).where(IdempotencyKey.scope == scope,
                                     IdempotencyKey.key_sha256 == key_sha256)
    ).first()


def insert_idempotency_key(session: Session, *, scope: str, key_sha256: str,
                           request_sha256: str, now: dt.datetime) -> IdempotencyKey:
    """Claim a key (no answer yet) and flush.

    Raises:
        sqlalchemy.exc.IntegrityError: the key is taken in `scope` (see the module docstring
            for when this waits first).
    """
    row = IdempotencyKey(scope=scope, key_sha256=key_sha256, request_sha256=request_sha256,
                         created_at=now)
    session.add(row)
    session.flush()
    return row


def store_idempotent_answer(session: Session, *, row: IdempotencyKey, status_code: int,
                            sealed_body: str) -> None:
    """Record the answer of a claimed key (same transaction as the claim); flush."""
    row.status_code = status_code
    row.response_body = sealed_body
    session.flush()


def delete_idempotency_key(session: Session, *, row: IdempotencyKey) -> None:
    """Drop one row (an expired key being reused, or a claim left without an answer)."""
    session.delete(row)
    session.flush()


def delete_expired_idempotency_keys(session: Session, *, scope: str, before: dt.datetime) -> int:
    """Delete `scope`'s keys created before `before`; returns how many. One scope at a time
    (one caller's rows), so concurrent requests of different callers never wait on each
    other's deletions."""
    result = session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.scope == scope,
                                     IdempotencyKey.created_at < before)
    )
    return result.rowcount or 0
