"""The tables, as SQLAlchemy Core objects for the queries.

The database itself is created and changed only by the alembic migrations in
``migrations/versions``; a change here needs a new migration (and a test that
an old database is upgraded).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    Table,
    Text,
)

#: alembic's bookkeeping table; named for koboi so a PostgreSQL database shared
#: with another alembic-managed application does not mix up the two histories.
VERSION_TABLE = "koboi_alembic_version"

metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("id", Text, primary_key=True),
    Column("status", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("config_name", Text, nullable=False, default=""),
    Column("config_hash", Text, nullable=False, default=""),
    Column("owner", Text, nullable=True),
    Column("metadata", Text, nullable=False, default="{}"),
    Column("last_seq", BigInteger, nullable=False, default=0),
    # What the session's runs used (migration 0005); NULL: written before it, unknown.
    Column("runs", BigInteger, nullable=True),
    Column("model_calls", BigInteger, nullable=True),
    Column("input_tokens", BigInteger, nullable=True),
    Column("output_tokens", BigInteger, nullable=True),
    Column("cost_usd", Float, nullable=True),
)

events = Table(
    "events",
    metadata,
    Column("session_id", Text, ForeignKey("sessions.id"), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("type", Text, nullable=False),
    Column("data", Text, nullable=False),
    Column("at", Float, nullable=False),
)

leases = Table(
    "leases",
    metadata,
    Column("session_id", Text, ForeignKey("sessions.id"), primary_key=True),
    Column("holder", Text, nullable=False),
    Column("fence", BigInteger, nullable=False),
    Column("expires_at", Float, nullable=False),
)

response_cache = Table(
    "response_cache",
    metadata,
    Column("key", Text, primary_key=True),
    Column("entry", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)

#: SQLite only makes an INTEGER PRIMARY KEY the auto-incrementing rowid.
AUDIT_ID = BigInteger().with_variant(Integer(), "sqlite")

# Append-only: migration 0003 adds triggers that refuse UPDATE and DELETE.
audit = Table(
    "audit",
    metadata,
    Column("id", AUDIT_ID, primary_key=True, autoincrement=True),
    Column("session_id", Text, nullable=False),
    Column("at", Float, nullable=False),
    Column("data", Text, nullable=False),
)

records = Table(
    "records",
    metadata,
    Column("kind", Text, primary_key=True),
    Column("key", Text, primary_key=True),
    Column("data", Text, nullable=False),
    Column("expires_at", Float, nullable=True),
    Column("updated_at", Float, nullable=False),
)

counters = Table(
    "counters",
    metadata,
    Column("key", Text, primary_key=True),
    Column("value", BigInteger, nullable=False),
    Column("expires_at", Float, nullable=True),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", Text, primary_key=True),
    Column("session_id", Text, nullable=False),
    Column("owner", Text, nullable=True),
    Column("owner_key", Text, nullable=False, default=""),
    Column("status", Text, nullable=False),
    Column("request", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("holder", Text, nullable=True),
    Column("fence", BigInteger, nullable=False, default=0),
    Column("lease_expires_at", Float, nullable=True),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("result", Text, nullable=True),
    Column("idempotency_key", Text, nullable=True),
    Column("request_hash", Text, nullable=True),
)

TABLES = frozenset(
    {
        "sessions",
        "events",
        "leases",
        "response_cache",
        "audit",
        "records",
        "counters",
        "jobs",
        VERSION_TABLE,
    }
)
