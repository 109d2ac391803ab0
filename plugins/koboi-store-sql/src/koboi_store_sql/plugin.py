"""koboi hooks of the SQL store. Imports SQLAlchemy only when a store is built."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi_store_sql.store import SQLStore

DEFAULT_SQLITE_URL = "sqlite:///.koboi/koboi.db"


def create_store(url: str, base_dir: Path) -> SQLStore:
    """Build a store for a ``sqlite:///...`` or ``postgresql[+psycopg]://...`` URL."""
    from koboi_store_sql.store import SQLStore

    return SQLStore(url, base_dir)


@hookimpl
def koboi_register_stores(register: Callable[..., None]) -> None:
    register(
        "sqlite",
        create_store,
        description="SQLite file in WAL mode: the embedded durable store (one machine).",
        default_url=DEFAULT_SQLITE_URL,
    )
    register(
        "postgresql",
        create_store,
        description="PostgreSQL (psycopg 3): the store several replicas share.",
    )


@hookimpl
def koboi_register_commands(register: Callable[..., None]) -> None:
    register(
        "db",
        "koboi_store_sql.cli:app",
        help="Show or upgrade the schema revision of the SQL store's database.",
    )
