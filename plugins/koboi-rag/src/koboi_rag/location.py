"""Where a config's index lives: the agent's store database, or ``rag.index``.

With ``rag.index: store`` (the default) the index goes into the database the
agent's store already uses: the SQLite file of a ``sqlite:///`` store, the
PostgreSQL database (and ``search_path``) of a ``postgresql://`` store. A
``memory://`` store gets a private in-memory index that lives as long as the
store object (for tests and throwaway agents). ``rag.index`` may name a
database instead (``sqlite:///rag.db``, relative to the config's directory, or a
``postgresql://`` URL).
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from koboi.errors import KoboiError
from koboi_rag.index import IndexStore, SQLiteIndex

if TYPE_CHECKING:
    from koboi.store import Store

_memory_indexes: weakref.WeakKeyDictionary[Any, IndexStore] = weakref.WeakKeyDictionary()
_postgres_indexes: dict[str, IndexStore] = {}
_lock = threading.Lock()


class NoIndexLocation(KoboiError):
    """The store keeps no database an index could live in."""


def index_for_url(url: str, base_dir: Path, label: str | None = None) -> IndexStore:
    """The index in the database ``url`` names (``sqlite:///...``, ``postgresql://...``)."""
    scheme = url.split(":", 1)[0].lower().split("+", 1)[0]
    if scheme == "sqlite":
        rest = url.split(":///", 1)[1] if ":///" in url else ""
        path_text = rest.split("?", 1)[0]
        if not path_text:
            raise KoboiError(f"rag.index {url!r} names no file; write sqlite:///path/to/rag.db")
        path = Path(path_text).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        return SQLiteIndex(path)
    if scheme in ("postgresql", "postgres"):
        with _lock:
            found = _postgres_indexes.get(url)
            if found is None:
                from koboi_rag.postgres_index import PostgresIndex

                found = PostgresIndex(url, label or _hide_password(url))
                _postgres_indexes[url] = found
            return found
    raise KoboiError(
        f"rag.index {url!r}: koboi-rag keeps indexes in SQLite (sqlite:///path) or PostgreSQL "
        "(postgresql://...) databases, or in the agent's store (index: store)"
    )


def close_indexes() -> None:
    """Close the PostgreSQL connections this process keeps for indexes (tests, shutdown)."""
    with _lock:
        found = list(_postgres_indexes.values())
        _postgres_indexes.clear()
    for index in found:
        index.close()


def _hide_password(url: str) -> str:
    head, sep, tail = url.partition("://")
    if "@" in tail and ":" in tail.split("@", 1)[0]:
        user = tail.split("@", 1)[0].split(":", 1)[0]
        return f"{head}{sep}{user}:***@{tail.split('@', 1)[1]}"
    return url


def index_for_store(store: Store) -> IndexStore:
    """The index in ``store``'s own database (see the module's docstring)."""
    from koboi.store import InMemoryStore, unwrap

    inner = unwrap(store)
    target = getattr(inner, "target", None)
    dialect = getattr(target, "dialect", None)
    if dialect == "sqlite" and getattr(target, "path", None) is not None:
        return SQLiteIndex(Path(target.path))  # type: ignore[union-attr]
    if dialect == "postgresql":
        return index_for_url(str(target.driver_url), Path.cwd(), str(target.label))  # type: ignore[union-attr]
    if isinstance(inner, InMemoryStore):
        with _lock:
            found = _memory_indexes.get(inner)
            if found is None:
                found = SQLiteIndex(None)
                _memory_indexes[inner] = found
            return found
    raise NoIndexLocation(
        f"the store {type(inner).__name__} keeps no SQL database for the index; set rag.index "
        "to a sqlite:/// or postgresql:// URL"
    )
