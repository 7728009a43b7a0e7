"""Grading history: every run of the grader is a row of ``gradings`` (the job queue moves
there), so regrades and final ranking runs add gradings instead of overwriting a result.

- New tables ``regrade_batches`` and ``final_runs``, and ``gradings``, which takes over the
  queue and result columns of ``submissions`` (status, attempts, lease, result, log, ...)
  plus ``purpose``, ``is_current`` (the grading that counts; at most one per submission),
  ``priority``, ``seed``, ``grader_version``, the batch/run it belongs to and, for a
  regrade, the grading it ``replaces``.
- Data: each existing submission becomes one current grading of purpose ``submission``
  with the same id (so ``check_verdicts`` rows are re-pointed by copying the id), its
  grader version read from ``versions``.
- ``check_verdicts.submission_id`` becomes ``grading_id``.

Downgrade: each submission gets its current grading's columns back; gradings that were not
current (regrades not applied, final runs) and their check verdicts are dropped.

SQLite: the ``submissions`` and ``check_verdicts`` tables are rebuilt (batch mode) with
foreign keys off; alembic/env.py turns them off for the run and checks them afterwards
(``PRAGMA foreign_key_check``), as SQLite's own procedure for schema changes prescribes.

Revision ID: 0004
Revises: 0002
Create Date: 2026-12-01 09:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)

#: The queue and result columns that move from ``submissions`` to ``gradings``, with their
#: types (frozen copies: migrations never import the application).
MOVED_COLUMNS: list[tuple[str, sa.types.TypeEngine, bool]] = [
    # (name, type, nullable in 0001)
    ("status", sa.String(length=16), False),
    ("attempts", sa.Integer(), False),
    ("worker_id", sa.String(length=200), True),
    ("lease_token", sa.String(length=64), True),
    ("lease_expires_at", TIMESTAMP, True),
    ("started_at", TIMESTAMP, True),
    ("finished_at", TIMESTAMP, True),
    ("last_attempt_error", sa.Text(), True),
    ("error_kind", sa.String(length=50), True),
    ("error_message", sa.Text(), True),
    ("headline_speedup", sa.Float(), True),
    ("result", sa.JSON(), True),
    ("benchmark", sa.JSON(), True),
    ("versions", sa.JSON(), True),
    ("device", sa.String(length=200), True),
    ("grader_exit_code", sa.Integer(), True),
    ("grading_duration_s", sa.Float(), True),
    ("log_text", sa.Text(), True),
    ("log_truncated", sa.Boolean(), True),
    ("grader_stderr", sa.Text(), True),
]
MOVED = [name for name, _type, _nullable in MOVED_COLUMNS]
STATUS_CHECK = "status IN ('queued', 'running', 'passed', 'failed', 'error')"


def _is_sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def upgrade() -> None:
    op.create_table(
        "regrade_batches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment", sa.String(length=100), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("selection", sa.JSON(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("decided_at", TIMESTAMP, nullable=True),
        sa.Column("decided_by", sa.String(length=200), nullable=True),
        sa.CheckConstraint("state IN ('open', 'applied', 'discarded')",
                           name=op.f("ck_regrade_batches_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_regrade_batches")),
    )
    op.create_table(
        "final_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment", sa.String(length=100), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_final_runs")),
    )
    op.create_index("ix_final_runs_assignment_id", "final_runs", ["assignment", "id"])
    op.create_table(
        "gradings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("purpose", sa.String(length=16), nullable=False),
        sa.Column("is_current", sa.Boolean(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("regrade_batch_id", sa.Integer(), nullable=True),
        sa.Column("final_run_id", sa.Integer(), nullable=True),
        sa.Column("replaces_grading_id", sa.Integer(), nullable=True),
        sa.Column("requested_by", sa.String(length=200), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        *[sa.Column(name, type_, nullable=nullable) for name, type_, nullable in MOVED_COLUMNS],
        sa.Column("grader_version", sa.String(length=100), nullable=True),
        sa.CheckConstraint(STATUS_CHECK, name=op.f("ck_gradings_status")),
        sa.CheckConstraint("purpose IN ('submission', 'regrade', 'final')",
                           name=op.f("ck_gradings_purpose")),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_gradings_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["regrade_batch_id"], ["regrade_batches.id"],
                                name=op.f("fk_gradings_regrade_batch_id_regrade_batches"),
                                ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["final_run_id"], ["final_runs.id"],
                                name=op.f("fk_gradings_final_run_id_final_runs"),
                                ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["replaces_grading_id"], ["gradings.id"],
                                name=op.f("fk_gradings_replaces_grading_id_gradings"),
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gradings")),
    )
    op.create_index(op.f("ix_gradings_submission_id"), "gradings", ["submission_id"])
    op.create_index(op.f("ix_gradings_regrade_batch_id"), "gradings", ["regrade_batch_id"])
    op.create_index(op.f("ix_gradings_final_run_id"), "gradings", ["final_run_id"])
    op.create_index("ix_gradings_status_priority_created_at", "gradings",
                    ["status", "priority", "created_at", "id"])
    op.create_index("uq_gradings_current_submission_id", "gradings", ["submission_id"],
                    unique=True, sqlite_where=sa.text("is_current"),
                    postgresql_where=sa.text("is_current"))

    # Every submission becomes its own current grading, under the same id.
    columns = ", ".join(MOVED)
    op.execute(
        f"INSERT INTO gradings (id, submission_id, purpose, is_current, priority, seed, "
        f"created_at, {columns}) "
        f"SELECT id, id, 'submission', true, 0, seed, created_at, {columns} FROM submissions"
    )
    grader_version = ("json_extract(versions, '$.grader')" if _is_sqlite()
                      else "versions ->> 'grader'")
    op.execute(f"UPDATE gradings SET grader_version = substr({grader_version}, 1, 100) "
               "WHERE versions IS NOT NULL")
    if not _is_sqlite():
        op.execute("SELECT setval(pg_get_serial_sequence('gradings', 'id'), "
                   "coalesce((SELECT max(id) FROM gradings), 0) + 1, false)")

    # check_verdicts.submission_id -> grading_id (same numbers: see above).
    with op.batch_alter_table("check_verdicts") as batch:
        batch.add_column(sa.Column("grading_id", sa.Integer(), nullable=True))
    op.execute("UPDATE check_verdicts SET grading_id = submission_id")
    with op.batch_alter_table("check_verdicts") as batch:
        batch.drop_index(op.f("ix_check_verdicts_submission_id"))
        batch.drop_constraint(op.f("fk_check_verdicts_submission_id_submissions"),
                              type_="foreignkey")
        batch.drop_column("submission_id")
        batch.alter_column("grading_id", existing_type=sa.Integer(), nullable=False)
        batch.create_foreign_key(op.f("fk_check_verdicts_grading_id_gradings"), "gradings",
                                 ["grading_id"], ["id"], ondelete="CASCADE")
        batch.create_index(op.f("ix_check_verdicts_grading_id"), ["grading_id"])

    # submissions keeps what describes the upload; the queue and results live in gradings.
    op.drop_index("ix_submissions_status_created_at", table_name="submissions")
    with op.batch_alter_table("submissions") as batch:
        batch.drop_constraint(op.f("ck_submissions_status"), type_="check")
        for name in MOVED:
            batch.drop_column(name)
    op.create_index("ix_submissions_assignment_student_id", "submissions",
                    ["assignment", "student_id"])


def downgrade() -> None:
    op.drop_index("ix_submissions_assignment_student_id", table_name="submissions")
    # Add the columns back (NOT NULL ones with a temporary default), fill them from each
    # submission's current grading, then drop the temporary defaults.
    temporary_defaults = {"status": sa.text("'queued'"), "attempts": sa.text("0")}
    with op.batch_alter_table("submissions") as batch:
        for name, type_, nullable in MOVED_COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=nullable,
                                       server_default=temporary_defaults.get(name)))
    assignments = ", ".join(
        f"{name} = (SELECT g.{name} FROM gradings g "
        f"WHERE g.submission_id = submissions.id AND g.is_current)" for name in MOVED
    )
    op.execute(f"UPDATE submissions SET {assignments} "
               "WHERE EXISTS (SELECT 1 FROM gradings g "
               "WHERE g.submission_id = submissions.id AND g.is_current)")
    with op.batch_alter_table("submissions") as batch:
        for name in temporary_defaults:
            batch.alter_column(name, existing_type=dict(
                (n, t) for n, t, _ in MOVED_COLUMNS)[name], existing_nullable=False,
                server_default=None)
        batch.create_check_constraint(op.f("ck_submissions_status"), sa.text(STATUS_CHECK))
    op.create_index("ix_submissions_status_created_at", "submissions",
                    ["status", "created_at", "id"])

    # check_verdicts.grading_id -> submission_id: only the current gradings' verdicts remain.
    with op.batch_alter_table("check_verdicts") as batch:
        batch.add_column(sa.Column("submission_id", sa.Integer(), nullable=True))
    op.execute("UPDATE check_verdicts SET submission_id = (SELECT g.submission_id FROM gradings g "
               "WHERE g.id = check_verdicts.grading_id AND g.is_current)")
    op.execute("DELETE FROM check_verdicts WHERE submission_id IS NULL")
    with op.batch_alter_table("check_verdicts") as batch:
        batch.drop_index(op.f("ix_check_verdicts_grading_id"))
        batch.drop_constraint(op.f("fk_check_verdicts_grading_id_gradings"), type_="foreignkey")
        batch.drop_column("grading_id")
        batch.alter_column("submission_id", existing_type=sa.Integer(), nullable=False)
        batch.create_foreign_key(op.f("fk_check_verdicts_submission_id_submissions"),
                                 "submissions", ["submission_id"], ["id"], ondelete="CASCADE")
        batch.create_index(op.f("ix_check_verdicts_submission_id"), ["submission_id"])

    op.drop_index("uq_gradings_current_submission_id", table_name="gradings")
    op.drop_index("ix_gradings_status_priority_created_at", table_name="gradings")
    op.drop_index(op.f("ix_gradings_final_run_id"), table_name="gradings")
    op.drop_index(op.f("ix_gradings_regrade_batch_id"), table_name="gradings")
    op.drop_index(op.f("ix_gradings_submission_id"), table_name="gradings")
    op.drop_table("gradings")
    op.drop_index("ix_final_runs_assignment_id", table_name="final_runs")
    op.drop_table("final_runs")
    op.drop_table("regrade_batches")
