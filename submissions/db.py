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


def create_db_engine(database_url: str, *, sqlite_busy_timeout_s: float = 30.0) -> Engine:
    """Create an engine for `database_url` with the project's connection policy.

    For a file-backed SQLite URL the parent directory is created if missing.

    Raises:
        sqlalchemy.exc.ArgumentError: if the URL is malformed.
    """
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)

    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url, connect_args={"timeout": sqlite_busy_timeout_s, "check_same_thread": False}
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


def engine_from_settings(settings: Settings) -> Engine:
    """The engine for ``settings.database_url``."""
    return create_db_engine(
        settings.database_url, sqlite_busy_timeout_s=settings.sqlite_busy_timeout_s
    )


def create_session_factory(engine: Engine) -> sessionmaker[Session]:
    """A session factory; sessions do not expire objects on commit (they are read after)."""
    return sessionmaker(bind=engine, expire_on_commit=False)
