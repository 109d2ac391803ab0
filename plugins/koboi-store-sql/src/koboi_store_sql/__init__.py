"""Durable koboi stores on SQLite and PostgreSQL (SQLAlchemy 2 + alembic).

``from koboi_store_sql import SQLStore`` imports SQLAlchemy; the plugin module
(:mod:`koboi_store_sql.plugin`) does not, so ``koboi --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["SQLStore", "StoreURL", "__version__", "parse_store_url"]

if TYPE_CHECKING:
    from koboi_store_sql._version import __version__
    from koboi_store_sql.store import SQLStore
    from koboi_store_sql.url import StoreURL, parse_store_url


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_store_sql._version import __version__

        return __version__
    if name == "SQLStore":
        from koboi_store_sql.store import SQLStore

        return SQLStore
    if name in ("StoreURL", "parse_store_url"):
        from koboi_store_sql import url

        return getattr(url, name)
    raise AttributeError(f"module 'koboi_store_sql' has no attribute {name!r}")
