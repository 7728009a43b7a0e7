"""alembic/: the migrations build the schema from empty on both databases, are reversible,
and agree with the ORM models (autogenerate finds no difference)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from submissions.db import create_db_engine
from submissions.migrations import (
    ALEMBIC_DIR,
    alembic_config,
    downgrade_to_base,
    schema_is_current,
    upgrade_to_head,
)
from submissions.models import Base

from ..conftest import DatabaseServer

EXPECTED_TABLES = {"students", "submissions", "check_verdicts", "worker_heartbeats", "gradings",
                   "extensions",
                   "regrade_batches", "final_runs", "assignments", "staff_members",
                   "audit_events"}


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


def test_unique_name_migration_renames_existing_duplicates_and_keeps_their_data(
    database_server: DatabaseServer,
) -> None:
    """0002 on a database that already holds duplicate names (created before the fix)."""
    url = _empty_database(database_server)
    engine = create_db_engine(url)
    now = dt.datetime(2026, 11, 29, 12, 0)
    try:
        command.upgrade(alembic_config(database_url=url), "0001")
        with engine.begin() as connection:
            for student_id, name in [(1, "alice"), (2, "Bob"), (3, " Alice"), (4, "ALICE")]:
                connection.execute(text(
                    "INSERT INTO students (id, name, token_sha256, created_at) "
                    "VALUES (:id, :name, :token, :now)"),
                    {"id": student_id, "name": name, "token": f"{student_id:064d}", "now": now})
            connection.execute(text(
                "INSERT INTO submissions (id, student_id, assignment, source_text, source_sha256, "
                "source_bytes, status, created_at, attempts) "
                "VALUES (1, 3, 'softmax_backward', 'x', :sha, 1, 'queued', :now, 0)"),
                {"sha": "0" * 64, "now": now})

        upgrade_to_head(database_url=url)
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT id, name, name_key, token_sha256 FROM students ORDER BY id")).all()
            assert [(r.id, r.name, r.name_key) for r in rows] == [
                (1, "alice", "alice"), (2, "Bob", "bob"),
                (3, "Alice #3", "alice #3"), (4, "ALICE #4", "alice #4"),
            ]
            assert [r.token_sha256 for r in rows] == [f"{i:064d}" for i in (1, 2, 3, 4)]
            # No student (or submission) was lost: no table was recreated under a cascade.
            assert connection.execute(
                text("SELECT student_id FROM submissions")).scalars().all() == [3]
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO students (name, name_key, token_sha256, created_at) "
                "VALUES ('Bob', 'bob', :token, :now)"), {"token": "9" * 64, "now": now})

        command.downgrade(alembic_config(database_url=url), "0001")
        assert "name_key" not in {c["name"] for c in inspect(engine).get_columns("students")}
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM submissions")).scalar() == 1
    finally:
        engine.dispose()
        database_server.drop(url)


def test_grading_history_migration_keeps_every_result_and_reverses(
    database_server: DatabaseServer,
) -> None:
    """0004 on a database with graded submissions: each becomes its own current grading
    (same id, check verdicts kept, grader version read from `versions`); the queue goes on
    from there; the downgrade puts the results back on the submissions."""
    url = _empty_database(database_server)
    engine = create_db_engine(url)
    now = dt.datetime(2026, 11, 30, 12, 0)
    try:
        command.upgrade(alembic_config(database_url=url), "0002")
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO students (id, name, name_key, token_sha256, created_at) "
                "VALUES (1, 'ada', 'ada', :token, :now)"), {"token": "1" * 64, "now": now})
            for submission_id, status, versions, speedup in (
                (1, "passed", '{"grader": "0.1.0"}', 1.5),
                (2, "failed", '{"grader": "0.1.0"}', None),
                (3, "queued", None, None),
            ):
                connection.execute(text(
                    "INSERT INTO submissions (id, student_id, assignment, source_text, "
                    "source_sha256, source_bytes, status, created_at, attempts, seed, versions, "
                    "headline_speedup, result) VALUES (:id, 1, 'softmax_backward', 'x', :sha, 1, "
                    ":status, :now, :attempts, :seed, :versions, :speedup, :result)"),
                    {"id": submission_id, "sha": "0" * 64, "status": status, "now": now,
                     "attempts": 0 if status == "queued" else 1, "seed": 100 + submission_id,
                     "versions": versions, "speedup": speedup,
                     "result": None if status == "queued" else f'{{"verdict": "{status}"}}'})
            for check_id, submission_id, passed in ((1, 1, True), (2, 2, False), (3, 2, True)):
                connection.execute(text(
                    "INSERT INTO check_verdicts (id, submission_id, position, name, passed, "
                    "skipped) VALUES (:id, :sid, :id, 'c', :passed, false)"),
                    {"id": check_id, "sid": submission_id, "passed": passed})

        command.upgrade(alembic_config(database_url=url), "0004")
        with engine.connect() as connection:
            rows = connection.execute(text(
                "SELECT id, submission_id, purpose, is_current, status, seed, grader_version, "
                "headline_speedup FROM gradings ORDER BY id")).all()
            assert [tuple(r) for r in rows] == [
                (1, 1, "submission", True, "passed", 101, "0.1.0", 1.5),
                (2, 2, "submission", True, "failed", 102, "0.1.0", None),
                (3, 3, "submission", True, "queued", 103, None, None),
            ]
            assert connection.execute(text(
                "SELECT grading_id, passed FROM check_verdicts ORDER BY id")).all() == [
                (1, True), (2, False), (2, True)]
        # The queue goes on: a new grading gets a fresh id (the sequence moved past the copies).
        with engine.begin() as connection:
            new_id = connection.execute(text(
                "INSERT INTO gradings (submission_id, purpose, is_current, priority, created_at, "
                "status, attempts) VALUES (1, 'regrade', false, 1, :now, 'queued', 0) "
                "RETURNING id"), {"now": now}).scalar_one()
            assert new_id == 4
        # At most one current grading per submission.
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(text("UPDATE gradings SET is_current = true WHERE id = 4"))

        command.downgrade(alembic_config(database_url=url), "0002")
        with engine.connect() as connection:
            rows = connection.execute(text(
                "SELECT id, status, attempts, headline_speedup FROM submissions ORDER BY id")).all()
            assert [tuple(r) for r in rows] == [
                (1, "passed", 1, 1.5), (2, "failed", 1, None), (3, "queued", 0, None)]
            assert connection.execute(text(
                "SELECT submission_id FROM check_verdicts ORDER BY id")).scalars().all() == [1, 2, 2]
        assert "gradings" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
        database_server.drop(url)


def test_extensions_migration_drops_the_stale_late_flag_and_its_downgrade_derives_it(
    database_server: DatabaseServer,
) -> None:
    """0007: `submissions.is_late` (frozen at upload, so wrong after a date change) is
    dropped and `extensions` created; the downgrade restores the flag from the class-wide
    due dates as they are then, not as they were at upload."""
    url = _empty_database(database_server)
    engine = create_db_engine(url)
    due = dt.datetime(2026, 12, 15, 23, 59)
    try:
        command.upgrade(alembic_config(database_url=url), "0006")
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO students (id, name, name_key, token_sha256, created_at) "
                "VALUES (1, 'ada', 'ada', :token, :now)"), {"token": "1" * 64, "now": due})
            connection.execute(text(
                "INSERT INTO assignments (name, due_at, late_policy, leaderboard_visible, "
                "correctness_points, speed_points, created_at) VALUES ('softmax_backward', "
                ":due, 'mark_late', true, 100, '[]', :due)"), {"due": due})
            for submission_id, offset_h, stale in ((1, -1, True), (2, 1, False)):
                connection.execute(text(
                    "INSERT INTO submissions (id, student_id, assignment, source_text, "
                    "source_sha256, source_bytes, created_at, is_late) VALUES (:id, 1, "
                    "'softmax_backward', 'x', :sha, 1, :at, :stale)"),
                    {"id": submission_id, "sha": "0" * 64, "stale": stale,
                     "at": due + dt.timedelta(hours=offset_h)})

        upgrade_to_head(database_url=url)
        assert "is_late" not in {c["name"] for c in inspect(engine).get_columns("submissions")}
        assert "extensions" in inspect(engine).get_table_names()

        command.downgrade(alembic_config(database_url=url), "0006")
        assert "extensions" not in inspect(engine).get_table_names()
        with engine.connect() as connection:
            flags = connection.execute(
                text("SELECT id, is_late FROM submissions ORDER BY id")).all()
        assert [(r.id, bool(r.is_late)) for r in flags] == [(1, False), (2, True)]
        upgrade_to_head(database_url=url)
    finally:
        engine.dispose()
        database_server.drop(url)
