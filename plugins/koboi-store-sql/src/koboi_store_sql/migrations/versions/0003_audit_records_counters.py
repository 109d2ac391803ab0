"""The audit trail (append-only), keyed records and counters.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_REFUSAL = "the audit trail is append-only"


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
    )
    op.create_index("ix_audit_session_id", "audit", ["session_id", "id"])
    op.create_table(
        "records",
        sa.Column("kind", sa.Text(), primary_key=True),
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "counters",
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
    )
    # The database itself refuses to change or remove audit records, whoever asks.
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION koboi_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{_REFUSAL}'; END $$"
        )
        op.execute(
            "CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit "
            "FOR EACH ROW EXECUTE FUNCTION koboi_audit_append_only()"
        )
    else:
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_no_{action.lower()} BEFORE {action} ON audit "
                f"BEGIN SELECT RAISE(ABORT, '{_REFUSAL}'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_append_only ON audit")
        op.execute("DROP FUNCTION IF EXISTS koboi_audit_append_only()")
    op.drop_table("counters")
    op.drop_table("records")
    op.drop_index("ix_audit_session_id", table_name="audit")
    op.drop_table("audit")
