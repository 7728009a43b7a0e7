"""Programmatic Alembic: `grader serve`, `grader worker` and the tests migrate with this."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
ALEMBIC_INI = REPOSITORY_ROOT / "alembic.ini"
ALEMBIC_DIR = REPOSITORY_ROOT / "alembic"


def alembic_config(
    *, database_url: str | None = None, connection: Connection | None = None
) -> Config:
    """An Alembic config for this project. Pass a URL or an open connection; with neither,
    alembic/env.py uses the settings (``GRADER_DATABASE_URL``)."""
    config = Config(str(ALEMBIC_INI))
    config.set_main_option("script_location", str(ALEMBIC_DIR))
    config.attributes["configure_logging"] = False
    if database_url is not None:
        config.attributes["database_url"] = database_url
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade_to_head(*, database_url: str | None = None, connection: Connection | None = None) -> None:
    """Apply every migration not yet applied (idempotent; safe to run at each start).

    Concurrency: on PostgreSQL two processes migrating at once are serialised by the
    DDL locks of the first; starting one `grader serve` or migrating before starting many
    workers avoids the race altogether.
    """
    command.upgrade(alembic_config(database_url=database_url, connection=connection), "head")


def downgrade_to_base(*, database_url: str | None = None, connection: Connection | None = None) -> None:
    """Revert every migration (tests use this to prove the migrations are reversible)."""
    command.downgrade(alembic_config(database_url=database_url, connection=connection), "base")


def schema_is_current(engine: Engine) -> bool:
    """True when the database is migrated to the newest revision (workers wait for this)."""
    script = ScriptDirectory.from_config(alembic_config())
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_heads()
    except SQLAlchemyError:
        return False
    return set(current) == set(script.get_heads())
