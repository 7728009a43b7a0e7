"""Similarity review (issue 35): ``similarity_sources`` (known public kernels of an
assignment: its reference, library kernels staff add), ``similarity_runs`` (a review of one
assignment: a job workers claim, with a lease, like a grading) and ``similarity_pairs`` (the
pairs a run found at or above its threshold, with the matching fragments of both sides and
staff's review mark).

Revision ID: 0011
Revises: 0009
Create Date: 2026-12-05 01:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "similarity_sources",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("origin", sa.Text(), nullable=True),
        sa.Column("source_text", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.String(length=64), nullable=False),
        sa.Column("added_by", sa.String(length=200), nullable=False),
        sa.Column("added_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("kind IN ('reference', 'public', 'retired')", name=op.f("ck_similarity_sources_kind")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_similarity_sources")),
    )
    op.create_index("uq_similarity_sources_assignment_name", "similarity_sources",
                    ["assignment", "name"], unique=True)
    op.create_table(
        "similarity_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("requested_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(length=200), nullable=True),
        sa.Column("lease_token", sa.String(length=64), nullable=True),
        sa.Column("lease_expires_at", TIMESTAMP, nullable=True),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("tool", sa.String(length=100), nullable=True),
        sa.Column("parameters", sa.JSON(), nullable=True),
        sa.Column("submissions_compared", sa.Integer(), nullable=True),
        sa.Column("sources_compared", sa.Integer(), nullable=True),
        sa.Column("pairs_compared", sa.Integer(), nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
        sa.CheckConstraint("status IN ('queued', 'running', 'finished', 'error')",
                           name=op.f("ck_similarity_runs_status")),
        sa.CheckConstraint("threshold > 0 AND threshold <= 1",
                           name=op.f("ck_similarity_runs_threshold")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_similarity_runs")),
    )
    op.create_index("ix_similarity_runs_assignment_id", "similarity_runs", ["assignment", "id"])
    op.create_index("ix_similarity_runs_status_created_at", "similarity_runs",
                    ["status", "created_at", "id"])
    op.create_table(
        "similarity_pairs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("left_submission_id", sa.Integer(), nullable=False),
        sa.Column("right_submission_id", sa.Integer(), nullable=True),
        sa.Column("right_source_id", sa.Integer(), nullable=True),
        sa.Column("similarity", sa.Float(), nullable=False),
        sa.Column("left_similarity", sa.Float(), nullable=False),
        sa.Column("right_similarity", sa.Float(), nullable=False),
        sa.Column("matched_chars", sa.Integer(), nullable=False),
        sa.Column("left_fragments", sa.JSON(), nullable=False),
        sa.Column("right_fragments", sa.JSON(), nullable=False),
        sa.Column("reviewed_at", TIMESTAMP, nullable=True),
        sa.Column("reviewed_by", sa.String(length=200), nullable=True),
        sa.Column("review_note", sa.Text(), nullable=True),
        sa.CheckConstraint("(right_submission_id IS NULL) <> (right_source_id IS NULL)",
                           name=op.f("ck_similarity_pairs_one_right")),
        sa.ForeignKeyConstraint(["run_id"], ["similarity_runs.id"],
                                name=op.f("fk_similarity_pairs_run_id_similarity_runs"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["left_submission_id"], ["submissions.id"],
                                name=op.f("fk_similarity_pairs_left_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["right_submission_id"], ["submissions.id"],
                                name=op.f("fk_similarity_pairs_right_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["right_source_id"], ["similarity_sources.id"],
                                name=op.f("fk_similarity_pairs_right_source_id_similarity_sources"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_similarity_pairs")),
    )
    op.create_index("ix_similarity_pairs_run_id_similarity", "similarity_pairs",
                    ["run_id", "similarity"])


def downgrade() -> None:
    op.drop_index("ix_similarity_pairs_run_id_similarity", table_name="similarity_pairs")
    op.drop_table("similarity_pairs")
    op.drop_index("ix_similarity_runs_status_created_at", table_name="similarity_runs")
    op.drop_index("ix_similarity_runs_assignment_id", table_name="similarity_runs")
    op.drop_table("similarity_runs")
    op.drop_index("uq_similarity_sources_assignment_name", table_name="similarity_sources")
    op.drop_table("similarity_sources")
