"""Named leases (``leases``): one process at a time, across processes and hosts, holds each;
the first is the scheduled LMS sync's, so that N API processes sync once per round, not N
times (submissions/lti/sync.py).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 08:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("acquired_at", _TIME, nullable=False),
        sa.Column("expires_at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leases")),
    )


def downgrade() -> None:
    op.drop_table("leases")
