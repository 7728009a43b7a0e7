"""Course policy: per-check points, which submission counts, late curves and slip days.

- ``assignments.check_points`` (staff's points per check; NULL: the assignment folder's
  points.toml), ``counting`` (``best`` or ``latest``), the late curve (``late_percent``,
  ``late_unit``, ``late_cap``, ``late_after_cap``) and the late policy ``penalty``;
- ``students.slip_days``: each student's slip-day budget for the term;
- ``slip_day_spends``: what a student spent on one assignment (one row per student and
  assignment: the unique index is what keeps two concurrent uploads from spending twice).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05 00:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("check_points", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("counting", sa.String(length=8), nullable=False,
                                   server_default=sa.text("'best'")))
        batch.add_column(sa.Column("late_percent", sa.Float(), nullable=True))
        batch.add_column(sa.Column("late_unit", sa.String(length=8), nullable=True))
        batch.add_column(sa.Column("late_cap", sa.Float(), nullable=True))
        batch.add_column(sa.Column("late_after_cap", sa.String(length=8), nullable=False,
                                   server_default=sa.text("'zero'")))
        batch.drop_constraint(op.f("ck_assignments_late_policy"), type_="check")
        batch.create_check_constraint(op.f("ck_assignments_late_policy"),
                                      "late_policy IN ('refuse', 'mark_late', 'penalty')")
        batch.create_check_constraint(op.f("ck_assignments_counting"), "counting IN ('best', 'latest')")
        batch.create_check_constraint(op.f("ck_assignments_late_unit"),
                                      "late_unit IS NULL OR late_unit IN ('hour', 'day')")
        batch.create_check_constraint(op.f("ck_assignments_late_after_cap"), "late_after_cap IN ('zero', 'refuse')")
        batch.create_check_constraint(
            op.f("ck_assignments_late_percent"), "late_percent IS NULL OR (late_percent >= 0 AND late_percent <= 100)")
        batch.create_check_constraint(op.f("ck_assignments_late_cap"), "late_cap IS NULL OR late_cap > 0")
    with op.batch_alter_table("students") as batch:
        batch.add_column(sa.Column("slip_days", sa.Integer(), nullable=False,
                                   server_default=sa.text("0")))
    op.create_table(
        "slip_day_spends",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("student_id", sa.Integer(), nullable=False),
        sa.Column("assignment", sa.String(length=100), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("days", sa.Integer(), nullable=False),
        sa.Column("spent_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("days > 0", name=op.f("ck_slip_day_spends_days")),
        sa.ForeignKeyConstraint(["student_id"], ["students.id"],
                                name=op.f("fk_slip_day_spends_student_id_students"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_slip_day_spends_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_slip_day_spends")),
    )
    op.create_index("uq_slip_day_spends_student_id_assignment", "slip_day_spends",
                    ["student_id", "assignment"], unique=True)
    op.create_index(op.f("ix_slip_day_spends_submission_id"), "slip_day_spends",
                    ["submission_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_slip_day_spends_submission_id"), table_name="slip_day_spends")
    op.drop_index("uq_slip_day_spends_student_id_assignment", table_name="slip_day_spends")
    op.drop_table("slip_day_spends")
    with op.batch_alter_table("students") as batch:
        batch.drop_column("slip_days")
    # A curve cannot be expressed in the old schema: its assignments go back to mark_late.
    op.execute("UPDATE assignments SET late_policy = 'mark_late' WHERE late_policy = 'penalty'")
    with op.batch_alter_table("assignments") as batch:
        for name in ("late_cap", "late_percent", "late_after_cap", "late_unit", "counting",
                     "late_policy"):
            batch.drop_constraint(op.f(f"ck_assignments_{name}"), type_="check")
        batch.create_check_constraint(op.f("ck_assignments_late_policy"), "late_policy IN ('refuse', 'mark_late')")
        for column in ("late_after_cap", "late_cap", "late_unit", "late_percent", "counting",
                       "check_points"):
            batch.drop_column(column)
