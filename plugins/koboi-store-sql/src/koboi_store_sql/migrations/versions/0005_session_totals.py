"""Session totals: runs, model calls, tokens and cost kept on the session row as events are appended.

Revision ID: 0005
Revises: 0004

The columns are NULL for sessions written before this revision: their totals are
unknown to the row (``SessionInfo.totals`` is None), and readers add them up from
the journal (``koboi.journal.totals_of``). ``NULL + n`` stays NULL, so such a
session never shows a partial sum; a session created from now on starts at 0.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_COLUMNS = ("runs", "model_calls", "input_tokens", "output_tokens")


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        for name in _COLUMNS:
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("cost_usd", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("cost_usd")
        for name in reversed(_COLUMNS):
            batch.drop_column(name)
