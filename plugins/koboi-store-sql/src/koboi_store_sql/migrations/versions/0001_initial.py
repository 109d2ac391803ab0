"""Sessions, their journals of events, and leases.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("config_name", sa.Text(), nullable=False, server_default=""),
        sa.Column("config_hash", sa.Text(), nullable=False, server_default=""),
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("metadata", sa.Text(), nullable=False, server_default="{}"),
        sa.Column("last_seq", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.create_index("ix_sessions_updated_at", "sessions", ["updated_at"])
    op.create_index("ix_sessions_owner_updated_at", "sessions", ["owner", "updated_at"])
    op.create_table(
        "events",
        sa.Column("session_id", sa.Text(), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "seq"),
    )
    op.create_table(
        "leases",
        sa.Column("session_id", sa.Text(), sa.ForeignKey("sessions.id"), primary_key=True),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
    op.drop_table("events")
    op.drop_index("ix_sessions_owner_updated_at", table_name="sessions")
    op.drop_index("ix_sessions_updated_at", table_name="sessions")
    op.drop_table("sessions")
