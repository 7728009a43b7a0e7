"""Idempotent creation: ``idempotency_keys`` holds the first answer to a POST sent with an
``Idempotency-Key`` (students, submissions), keyed by the caller's scope and the key's
sha256, with the request's fingerprint; rows expire after 24 h (the service deletes them).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 06:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("scope", sa.String(length=64), nullable=False),
        sa.Column("key_sha256", sa.String(length=64), nullable=False),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("response_body", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_idempotency_keys")),
    )
    op.create_index("uq_idempotency_keys_scope_key", "idempotency_keys",
                    ["scope", "key_sha256"], unique=True)
    op.create_index(op.f("ix_idempotency_keys_created_at"), "idempotency_keys", ["created_at"],
                    unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_idempotency_keys_created_at"), table_name="idempotency_keys")
    op.drop_index("uq_idempotency_keys_scope_key", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
