"""Fleet: where each worker runs (its GPU, host cores and launcher: a SLURM job, a Kubernetes
pod) on its heartbeat row, and ``fleet_controllers``, the last state each fleet controller
(`grader fleet slurm`) saw and acted on, so that /healthz and /metrics show the fleet.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 21:45:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("worker_heartbeats") as batch:
        batch.add_column(sa.Column("gpu", sa.String(length=300), nullable=True))
        batch.add_column(sa.Column("cpus", sa.String(length=1000), nullable=True))
        batch.add_column(sa.Column("launcher", sa.String(length=200), nullable=True))
    op.create_table(
        "fleet_controllers",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("scheduler", sa.String(length=20), nullable=False),
        sa.Column("max_jobs", sa.Integer(), nullable=False),
        sa.Column("pending_jobs", sa.Integer(), nullable=False),
        sa.Column("running_jobs", sa.Integer(), nullable=False),
        sa.Column("queue_depth", sa.Integer(), nullable=False),
        sa.Column("submitted_total", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_tick_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_fleet_controllers")),
    )


def downgrade() -> None:
    op.drop_table("fleet_controllers")
    with op.batch_alter_table("worker_heartbeats") as batch:
        batch.drop_column("launcher")
        batch.drop_column("cpus")
        batch.drop_column("gpu")
