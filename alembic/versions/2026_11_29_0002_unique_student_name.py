"""Unique student names: students.name_key (the trimmed, case-folded name), unique index.

Existing rows are backfilled. Names that already collide (e.g. two "alice" rows created
before this migration) are kept apart by renaming every student after the first (lowest
id) to "<name> #<id>", so that the unique index can be created and grade CSVs can tell them
apart; their tokens and submissions are unchanged. The renames are logged.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 18:00:00+00:00
"""

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

logger = logging.getLogger("alembic.runtime.migration")

NAME_CHARS = 200

students = sa.table(
    "students",
    sa.column("id", sa.Integer()),
    sa.column("name", sa.String(NAME_CHARS)),
    sa.column("name_key", sa.String(600)),
)


def _name_key(name: str) -> str:
    """Frozen copy of submissions.service.student_name_key (migrations never import the app)."""
    return name.strip().casefold()


def _backfill_name_keys() -> None:
    connection = op.get_bind()
    rows = connection.execute(sa.select(students.c.id, students.c.name).order_by(students.c.id))
    taken: set[str] = set()
    for student_id, name in rows.all():
        key = _name_key(name)
        new_name = name
        suffix = 0
        while key in taken:
            tag = f" #{student_id}" + (f".{suffix}" if suffix else "")
            new_name = name.strip()[: NAME_CHARS - len(tag)] + tag
            key = _name_key(new_name)
            suffix += 1
        taken.add(key)
        if new_name != name:
            logger.warning("student %d renamed from %r to %r: the name was already taken",
                           student_id, name, new_name)
        connection.execute(
            sa.update(students)
            .where(students.c.id == student_id)
            .values(name=new_name, name_key=key)
        )


def upgrade() -> None:
    # No batch mode: on SQLite a batch operation recreates the table (copy, DROP, rename),
    # and dropping `students` with foreign keys on would cascade-delete every submission.
    # SQLite can add a NOT NULL column only with a default; '' is overwritten just below.
    op.add_column(
        "students",
        sa.Column("name_key", sa.String(length=600), nullable=False, server_default=""),
    )
    _backfill_name_keys()
    op.create_index("uq_students_name_key", "students", ["name_key"], unique=True)
    if op.get_bind().dialect.name != "sqlite":  # SQLite cannot drop a default in place
        op.alter_column("students", "name_key", existing_type=sa.String(length=600),
                        existing_nullable=False, server_default=None)


def downgrade() -> None:
    op.drop_index("uq_students_name_key", table_name="students")
    op.drop_column("students", "name_key")  # SQLite >= 3.35: ALTER TABLE ... DROP COLUMN
