"""alembic/: the migrations build the schema from empty on both databases, are reversible,
and agree with the ORM models (autogenerate finds no difference)."""

from __future__ import annotations

import re

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from submissions.db import create_db_engine
from submissions.migrations import ALEMBIC_DIR, downgrade_to_base, schema_is_current, upgrade_to_head
from submissions.models import Base

from ..conftest import DatabaseServer

EXPECTED_TABLES = {"students", "submissions", "check_verdicts", "worker_heartbeats"}


def _empty_database(database_server: DatabaseServer) -> str:
    url = database_server.create_copy()
    downgrade_to_base(database_url=url)
    return url


def test_upgrade_from_empty_then_downgrade_and_upgrade_again(database_server: DatabaseServer) -> None:
    url = _empty_database(database_server)
    engine = create_db_engine(url)
    try:
        assert EXPECTED_TABLES.isdisjoint(inspect(engine).get_table_names())
        assert not schema_is_current(engine)

        upgrade_to_head(database_url=url)
        assert EXPECTED_TABLES <= set(inspect(engine).get_table_names())
        assert schema_is_current(engine)

        downgrade_to_base(database_url=url)
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}

        upgrade_to_head(database_url=url)
        assert schema_is_current(engine)
    finally:
        engine.dispose()
        database_server.drop(url)


def test_models_and_migrations_agree(rollback_database) -> None:
    _url, engine = rollback_database
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


def test_migration_files_are_dated_and_static() -> None:
    files = sorted((ALEMBIC_DIR / "versions").glob("*.py"))
    assert files
    for path in files:
        assert re.fullmatch(r"\d{4}_\d{2}_\d{2}_\d{4}_[a-z0-9_]+\.py", path.name), path.name
        source = path.read_text()
        assert "import submissions" not in source and "from submissions" not in source
        assert "def downgrade" in source and "pass\n" not in source.split("def downgrade")[1]
