"""Alembic environment: the only way the schema is created (SQLite and PostgreSQL alike).

The URL comes from the service settings (``GRADER_DATABASE_URL``), unless the caller passes
a connection or a URL in ``config.attributes`` (submissions/migrations.py, tests).
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from submissions.db import create_db_engine
from submissions.models import Base
from submissions.settings import get_settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER most things; batch mode recreates tables when needed.
        render_as_batch=connection.dialect.name == "sqlite",
    )


def run_migrations_offline() -> None:
    """Emit SQL to stdout (``alembic upgrade head --sql``)."""
    url = config.attributes.get("database_url") or get_settings().database_url
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        compare_type=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations on a live connection."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.attributes.get("database_url") or get_settings().database_url
    engine = create_db_engine(url)
    try:
        with engine.connect() as connection:
            if connection.dialect.name == "sqlite":
                _run_sqlite_migrations(connection)
            else:
                _configure(connection)
                with context.begin_transaction():
                    context.run_migrations()
    finally:
        engine.dispose()


def _run_sqlite_migrations(connection: Connection) -> None:
    """SQLite's procedure for schema changes: foreign keys off outside the transaction,
    migrate (batch mode rebuilds a table by copy, DROP and rename; with foreign keys on, the
    DROP would cascade-delete the rows that refer to it), check every reference, foreign keys
    on again. A reference left broken aborts the migration (rolled back)."""
    driver_connection = connection.connection.driver_connection
    # The driver connection is in autocommit mode (submissions/db.py) and no transaction is
    # open yet, so the pragma takes effect (inside a transaction it would be ignored).
    driver_connection.execute("PRAGMA foreign_keys=OFF")
    try:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
            broken = connection.execute(text("PRAGMA foreign_key_check")).all()
            if broken:
                raise RuntimeError(f"migration left broken foreign keys: {broken[:10]}")
    finally:
        driver_connection.execute("PRAGMA foreign_keys=ON")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
