"""LTI 1.3 Advantage, the tool side (docs/lms.md): the platforms staff registered, the tool's
own signing keys, OIDC login states and used nonces, the people a platform launched or listed
(by its stable ``sub``), its course contexts (NRPS and AGS endpoints, the last roster sync),
resource links, one line item per assignment and context, each student's score sync state,
and the browser sessions a launch opens.

Revision ID: 0012
Revises: 0009
Create Date: 2026-12-05 01:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "lti_registrations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("issuer", sa.String(length=500), nullable=False),
        sa.Column("client_id", sa.String(length=255), nullable=False),
        sa.Column("deployment_ids", sa.JSON(), nullable=False),
        sa.Column("auth_login_url", sa.String(length=1000), nullable=False),
        sa.Column("auth_token_url", sa.String(length=1000), nullable=False),
        sa.Column("keyset_url", sa.String(length=1000), nullable=False),
        sa.Column("auth_audience", sa.String(length=1000), nullable=True),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_registrations")),
    )
    op.create_index("uq_lti_registrations_issuer_client_id", "lti_registrations",
                    ["issuer", "client_id"], unique=True)
    op.create_table(
        "lti_tool_keys",
        sa.Column("kid", sa.String(length=64), nullable=False),
        sa.Column("private_key_pem", sa.Text(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("retired_at", _TIME, nullable=True),
        sa.PrimaryKeyConstraint("kid", name=op.f("pk_lti_tool_keys")),
    )
    op.create_table(
        "lti_login_states",
        sa.Column("state", sa.String(length=64), nullable=False),
        sa.Column("nonce", sa.String(length=64), nullable=False),
        sa.Column("registration_id", sa.Integer(), nullable=False),
        sa.Column("expires_at", _TIME, nullable=False),
        sa.ForeignKeyConstraint(["registration_id"], ["lti_registrations.id"],
                                name=op.f("fk_lti_login_states_registration_id_lti_registrations"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("state", name=op.f("pk_lti_login_states")),
    )
    op.create_table(
        "lti_used_nonces",
        sa.Column("nonce_sha256", sa.String(length=64), nullable=False),
        sa.Column("expires_at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("nonce_sha256", name=op.f("pk_lti_used_nonces")),
    )
    op.create_table(
        "lti_identities",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("registration_id", sa.Integer(), nullable=False),
        sa.Column("sub", sa.String(length=255), nullable=False),
        sa.Column("student_id", sa.Integer(), nullable=True),
        sa.Column("staff_id", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("email", sa.String(length=320), nullable=True),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("last_seen_at", _TIME, nullable=False),
        sa.ForeignKeyConstraint(["registration_id"], ["lti_registrations.id"],
                                name=op.f("fk_lti_identities_registration_id_lti_registrations"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["student_id"], ["students.id"],
                                name=op.f("fk_lti_identities_student_id_students"),
                                ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["staff_id"], ["staff_members.id"],
                                name=op.f("fk_lti_identities_staff_id_staff_members"),
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_identities")),
    )
    op.create_index("uq_lti_identities_registration_id_sub", "lti_identities",
                    ["registration_id", "sub"], unique=True)
    op.create_index("ix_lti_identities_student_id", "lti_identities", ["student_id"])
    op.create_table(
        "lti_contexts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("registration_id", sa.Integer(), nullable=False),
        sa.Column("deployment_id", sa.String(length=255), nullable=False),
        sa.Column("context_id", sa.String(length=255), nullable=False),
        sa.Column("title", sa.String(length=500), nullable=True),
        sa.Column("memberships_url", sa.String(length=1000), nullable=True),
        sa.Column("lineitems_url", sa.String(length=1000), nullable=True),
        sa.Column("ags_scopes", sa.JSON(), nullable=False),
        sa.Column("roster_synced_at", _TIME, nullable=True),
        sa.Column("roster_changes", sa.JSON(), nullable=True),
        sa.Column("roster_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["registration_id"], ["lti_registrations.id"],
                                name=op.f("fk_lti_contexts_registration_id_lti_registrations"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_contexts")),
    )
    op.create_index("uq_lti_contexts_registration_id_context_id", "lti_contexts",
                    ["registration_id", "context_id"], unique=True)
    op.create_table(
        "lti_memberships",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("context_row_id", sa.Integer(), nullable=False),
        sa.Column("identity_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("changed_at", _TIME, nullable=False),
        sa.CheckConstraint("status IN ('active', 'dropped')", name=op.f("ck_lti_memberships_status")),
        sa.ForeignKeyConstraint(["context_row_id"], ["lti_contexts.id"],
                                name=op.f("fk_lti_memberships_context_row_id_lti_contexts"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["identity_id"], ["lti_identities.id"],
                                name=op.f("fk_lti_memberships_identity_id_lti_identities"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_memberships")),
    )
    op.create_index("uq_lti_memberships_context_row_id_identity_id", "lti_memberships",
                    ["context_row_id", "identity_id"], unique=True)
    op.create_table(
        "lti_resource_links",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("context_row_id", sa.Integer(), nullable=False),
        sa.Column("resource_link_id", sa.String(length=255), nullable=False),
        sa.Column("assignment", sa.String(length=100), nullable=False),
        sa.Column("lineitem_url", sa.String(length=1000), nullable=True),
        sa.Column("created_at", _TIME, nullable=False),
        sa.ForeignKeyConstraint(["context_row_id"], ["lti_contexts.id"],
                                name=op.f("fk_lti_resource_links_context_row_id_lti_contexts"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_resource_links")),
    )
    op.create_index("uq_lti_resource_links_context_row_id_resource_link_id", "lti_resource_links",
                    ["context_row_id", "resource_link_id"], unique=True)
    op.create_table(
        "lti_line_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("context_row_id", sa.Integer(), nullable=False),
        sa.Column("assignment", sa.String(length=100), nullable=False),
        sa.Column("lineitem_url", sa.String(length=1000), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.ForeignKeyConstraint(["context_row_id"], ["lti_contexts.id"],
                                name=op.f("fk_lti_line_items_context_row_id_lti_contexts"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_line_items")),
    )
    op.create_index("uq_lti_line_items_context_row_id_assignment", "lti_line_items",
                    ["context_row_id", "assignment"], unique=True)
    op.create_table(
        "lti_score_syncs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("context_row_id", sa.Integer(), nullable=False),
        sa.Column("assignment", sa.String(length=100), nullable=False),
        sa.Column("student_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("score_given", sa.Float(), nullable=True),
        sa.Column("score_maximum", sa.Float(), nullable=True),
        sa.Column("synced_score", sa.Float(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", _TIME, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("synced_at", _TIME, nullable=True),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.CheckConstraint("state IN ('pending', 'synced', 'failed', 'no_identity')",
                           name=op.f("ck_lti_score_syncs_state")),
        sa.ForeignKeyConstraint(["context_row_id"], ["lti_contexts.id"],
                                name=op.f("fk_lti_score_syncs_context_row_id_lti_contexts"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["student_id"], ["students.id"],
                                name=op.f("fk_lti_score_syncs_student_id_students"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_score_syncs")),
    )
    op.create_index("uq_lti_score_syncs_context_row_id_assignment", "lti_score_syncs",
                    ["context_row_id", "assignment", "student_id"], unique=True)
    op.create_table(
        "lti_sessions",
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("student_id", sa.Integer(), nullable=True),
        sa.Column("staff_id", sa.Integer(), nullable=True),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("expires_at", _TIME, nullable=False),
        sa.ForeignKeyConstraint(["student_id"], ["students.id"],
                                name=op.f("fk_lti_sessions_student_id_students"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["staff_id"], ["staff_members.id"],
                                name=op.f("fk_lti_sessions_staff_id_staff_members"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_sha256", name=op.f("pk_lti_sessions")),
    )


def downgrade() -> None:
    for table in ("lti_sessions", "lti_score_syncs", "lti_line_items", "lti_resource_links",
                  "lti_memberships", "lti_contexts", "lti_identities", "lti_used_nonces",
                  "lti_login_states", "lti_tool_keys", "lti_registrations"):
        op.drop_table(table)
