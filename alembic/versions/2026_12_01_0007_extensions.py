"""Due dates and extensions: ``extensions`` (a student's own due date for one assignment:
a new date or extra days, the reason, who granted it), and ``submissions.is_late`` dropped.

Lateness was frozen at upload, so moving a due date or granting an extension left old
uploads marked wrong. It is now derived whenever it is read (submissions/lateness.py), and
the column is dropped rather than kept so that nothing can read the stale flag as truth.
The downgrade restores it from the class-wide due dates (the extensions it drops with their
table cannot be expressed in the old schema).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 21:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "extensions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment", sa.String(length=100), nullable=False),
        sa.Column("student_id", sa.Integer(), nullable=False),
        sa.Column("due_at", TIMESTAMP, nullable=True),
        sa.Column("extra_days", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("granted_by", sa.String(length=200), nullable=False),
        sa.Column("granted_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("(due_at IS NULL) <> (extra_days IS NULL)",
                           name=op.f("ck_extensions_one_term")),
        sa.CheckConstraint("extra_days IS NULL OR extra_days > 0",
                           name=op.f("ck_extensions_extra_days")),
        sa.ForeignKeyConstraint(["student_id"], ["students.id"],
                                name=op.f("fk_extensions_student_id_students"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_extensions")),
    )
    op.create_index("uq_extensions_assignment_student_id", "extensions",
                    ["assignment", "student_id"], unique=True)
    # SQLite >= 3.35: ALTER TABLE ... DROP COLUMN (no table rebuild).
    op.drop_column("submissions", "is_late")


def downgrade() -> None:
    op.add_column("submissions", sa.Column("is_late", sa.Boolean(), nullable=False,
                                           server_default=sa.false()))
    submissions = sa.table("submissions", sa.column("assignment", sa.String),
                           sa.column("created_at", TIMESTAMP), sa.column("is_late", sa.Boolean))
    assignments = sa.table("assignments", sa.column("name", sa.String),
                           sa.column("due_at", TIMESTAMP))
    due = (sa.select(assignments.c.due_at)
           .where(assignments.c.name == submissions.c.assignment).scalar_subquery())
    op.execute(submissions.update().where(submissions.c.created_at > due)
               .values(is_late=sa.true()))
    op.drop_index("uq_extensions_assignment_student_id", table_name="extensions")
    op.drop_table("extensions")
