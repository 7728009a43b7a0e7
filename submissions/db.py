"""Engine and session factory for SQLite (WAL) and PostgreSQL (psycopg 3).

SQLite notes: every connection uses WAL mode and a busy timeout, and every transaction
starts with ``BEGIN IMMEDIATE``. Taking the write lock at BEGIN (instead of at the first
write) is what keeps an API process and an embedded worker from ever failing with
"database is locked": a deferred transaction that reads and then writes cannot wait for the
lock once another connection has committed (SQLITE_BUSY_SNAPSHOT); an immediate one waits
up to the busy timeout instead. WAL lets readers outside a transaction proceed meanwhile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from submissions.settings import Settings


def create_db_engine(database_url: str, *, sqlite_busy_timeout_s: float = 30.0,
                     pool_size: int | None = None, pool_timeout_s: float | None = None) -> Engine:
    """Create an engine for `database_url` with the project's connection policy.

    `pool_size` (connections kept, with no overflow) and `pool_timeout_s` (seconds a
    checkout waits before `sqlalchemy.exc.TimeoutError`, which the API answers with 503)
    are SQLAlchemy's defaults (5 + 10 overflow, 30 s) when None; the API passes its thread
    count and a short timeout (docs/reliability.md, "Request path").
    For a file-backed SQLite URL the parent directory is created if missing.

    Raises:
        sqlalchemy.exc.ArgumentError: if the URL is malformed.
    """
    url = make_url(database_url)
    pool: dict[str, Any] = {}
    if pool_size is not None:
        pool.update(pool_size=pool_size, max_overflow=0)
    if pool_timeout_s is not None:
        pool["pool_timeout"] = pool_timeout_s
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, **pool)

    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    if url.database in (None, "", ":memory:"):
        pool = {}  # a memory database keeps its single-connection pool
    engine = create_engine(
        url, connect_args={"timeout": sqlite_busy_timeout_s, "check_same_thread": False}, **pool
    )
    busy_timeout_ms = int(sqlite_busy_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the sqlite3 module, decide where transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def engine_from_settings(settings: Settings, *, for_api: bool = False) -> Engine:
    """The engine for ``settings.database_url``. `for_api`: a pool of ``api_threads``
    connections (one per thread of the API process) and a checkout timeout of
    ``db_pool_timeout_s``."""
    if for_api:
        return create_db_engine(
            settings.database_url, sqlite_busy_timeout_s=settings.sqlite_busy_timeout_s,
            pool_size=settings.api_threads, pool_timeout_s=settings.db_pool_timeout_s)
    return create_db_engine(
        settings.database_url, sqlite_busy_timeout_s=settings.sqlite_busy_timeout_s
    )


def create_session_factory(engine: Engine) -> sessionmaker[Session]:
    """A session factory; sessions do not expire objects on commit (they are read after)."""
    return sessionmaker(bind=engine, expire_on_commit=False)
