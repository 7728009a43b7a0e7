"""Running a course: assignment settings, staff accounts, the audit log, roster fields of
students, late and disqualified submissions.

- ``assignments``: per-assignment settings (dates, late policy, limits, leaderboard
  visibility, points); rows are created by the service on first use, not here (the
  assignment registry is code, grader/manifest.py, and migrations never import it).
- ``staff_members``: instructors and TAs with personal tokens (stored hashed).
- ``audit_events``: every staff action.
- ``students``: ``email`` and ``external_id`` (unique when present) and ``token_rotated_at``.
- ``submissions``: ``is_late`` (false for every existing row) and the disqualification
  (``disqualified_at``, ``disqualified_by``, ``disqualified_reason``).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 09:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "assignments",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("opens_at", TIMESTAMP, nullable=True),
        sa.Column("due_at", TIMESTAMP, nullable=True),
        sa.Column("late_policy", sa.String(length=16), nullable=False),
        sa.Column("max_submissions", sa.Integer(), nullable=True),
        sa.Column("rate_limit_submissions", sa.Integer(), nullable=True),
        sa.Column("rate_limit_window_s", sa.Float(), nullable=True),
        sa.Column("leaderboard_visible", sa.Boolean(), nullable=False),
        sa.Column("correctness_points", sa.Float(), nullable=False),
        sa.Column("speed_points", sa.JSON(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=True),
        sa.Column("updated_by", sa.String(length=200), nullable=True),
        sa.CheckConstraint("late_policy IN ('refuse', 'mark_late')",
                           name=op.f("ck_assignments_late_policy")),
        sa.CheckConstraint("max_submissions IS NULL OR max_submissions > 0",
                           name=op.f("ck_assignments_max_submissions")),
        sa.CheckConstraint("rate_limit_submissions IS NULL OR rate_limit_submissions > 0",
                           name=op.f("ck_assignments_rate_limit_submissions")),
        sa.CheckConstraint("rate_limit_window_s IS NULL OR rate_limit_window_s > 0",
                           name=op.f("ck_assignments_rate_limit_window_s")),
        sa.CheckConstraint("correctness_points >= 0",
                           name=op.f("ck_assignments_correctness_points")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_assignments")),
    )
    op.create_table(
        "staff_members",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("name_key", sa.String(length=600), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("token_rotated_at", TIMESTAMP, nullable=True),
        sa.CheckConstraint("role IN ('instructor', 'ta')", name=op.f("ck_staff_members_role")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_staff_members")),
        sa.UniqueConstraint("token_sha256", name=op.f("uq_staff_members_token_sha256")),
    )
    op.create_index("uq_staff_members_name_key", "staff_members", ["name_key"], unique=True)
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("actor_kind", sa.String(length=16), nullable=False),
        sa.Column("actor_staff_id", sa.Integer(), nullable=True),
        sa.Column("actor_name", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target_type", sa.String(length=32), nullable=True),
        sa.Column("target_id", sa.String(length=100), nullable=True),
        sa.Column("assignment", sa.String(length=100), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["actor_staff_id"], ["staff_members.id"],
                                name=op.f("fk_audit_events_actor_staff_id_staff_members"),
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    op.create_index(op.f("ix_audit_events_created_at"), "audit_events", ["created_at"])
    op.create_index(op.f("ix_audit_events_action"), "audit_events", ["action"])

    # Plain ADD COLUMN (no table rebuild) on both databases.
    op.add_column("students", sa.Column("email", sa.String(length=320), nullable=True))
    op.add_column("students", sa.Column("external_id", sa.String(length=100), nullable=True))
    op.add_column("students", sa.Column("token_rotated_at", TIMESTAMP, nullable=True))
    op.create_index("uq_students_email", "students", ["email"], unique=True)
    op.create_index("uq_students_external_id", "students", ["external_id"], unique=True)

    op.add_column("submissions", sa.Column("is_late", sa.Boolean(), nullable=False,
                                           server_default=sa.false()))
    op.add_column("submissions", sa.Column("disqualified_at", TIMESTAMP, nullable=True))
    op.add_column("submissions", sa.Column("disqualified_by", sa.String(length=200),
                                           nullable=True))
    op.add_column("submissions", sa.Column("disqualified_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    # SQLite >= 3.35: ALTER TABLE ... DROP COLUMN (no table rebuild); indexes go first.
    op.drop_column("submissions", "disqualified_reason")
    op.drop_column("submissions", "disqualified_by")
    op.drop_column("submissions", "disqualified_at")
    op.drop_column("submissions", "is_late")
    op.drop_index("uq_students_external_id", table_name="students")
    op.drop_index("uq_students_email", table_name="students")
    op.drop_column("students", "token_rotated_at")
    op.drop_column("students", "external_id")
    op.drop_column("students", "email")
    op.drop_index(op.f("ix_audit_events_action"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_created_at"), table_name="audit_events")
    op.drop_table("audit_events")
    op.drop_index("uq_staff_members_name_key", table_name="staff_members")
    op.drop_table("staff_members")
    op.drop_table("assignments")
