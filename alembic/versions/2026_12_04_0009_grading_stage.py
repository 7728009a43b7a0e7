"""The stage of a running grading (``gradings.stage``, ``gradings.stage_started_at``): what the
grader reported last (grader/stages.py: preparing, compiling, checks, benchmark), shown by
``grader submit`` and the live submission page.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 14:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gradings") as batch:
        batch.add_column(sa.Column("stage", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("stage_started_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gradings") as batch:
        batch.drop_column("stage_started_at")
        batch.drop_column("stage")
