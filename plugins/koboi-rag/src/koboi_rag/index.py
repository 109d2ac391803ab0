"""The index's tables, in the agent's store database: SQLite or PostgreSQL.

No extension, no separate server. Per collection:

- ``rag_collections``: the analyser, the embedder's identity, and a ``generation``
  bumped by every change, which tells in-memory caches (the BM25 index, the vector
  matrix) to reload; ``rag_embedder_states``: the embedder's fitted state (LSA's
  vocabulary and projection);
- ``rag_documents``: one row per document (its key, its source entry, its content
  hash, its version, title and metadata);
- ``rag_chunks``: one row per chunk: text, analysed terms, span, heading, page,
  metadata, and its vector (float32 bytes) with the identity of the space it was
  made in (NULL until embedded);
- the lexical index over the analysed terms: an FTS5 table on SQLite
  (``rag_fts``), a ``tsvector`` column with a GIN index on PostgreSQL.

Writes are transactions per document (its old chunks out, its new chunks in, its
row updated: all or nothing) and per batch of vectors, so a process killed at any
point leaves every document either as it was or as it is now, and a rerun redoes
only what was not committed.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from koboi.errors import KoboiError


class IndexStoreError(KoboiError):
    """The index's database refused or failed an operation."""


@dataclass(frozen=True)
class DocumentRecord:
    key: str
    source: str
    content_hash: str
    version: str = ""
    title: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChunkRecord:
    position: int
    start: int
    end: int
    text: str
    terms: str
    heading: str = ""
    page: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredChunk:
    id: int
    doc_key: str
    position: int
    start: int
    end: int
    text: str
    heading: str
    page: int | None
    metadata: dict[str, Any]
    title: str


@dataclass(frozen=True)
class CollectionInfo:
    analyzer: str
    embedder: str
    state: bytes | None
    generation: int


def _dumps(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), sort_keys=True, separators=(",", ":"), default=str)


#: The columns of a chunk row, in the order of :func:`chunk_row`.
CHUNK_COLUMNS = (
    "collection, doc_key, position, start_char, end_char, heading, page, text, terms, metadata"
)


def chunk_row(collection: str, key: str, chunk: ChunkRecord) -> tuple[Any, ...]:
    return (
        collection,
        key,
        chunk.position,
        chunk.start,
        chunk.end,
        chunk.heading,
        chunk.page,
        chunk.text,
        chunk.terms,
        _dumps(chunk.metadata),
    )


class IndexStore(ABC):
    """One database holding indexes (collections). Methods are sync: the engine calls
    them in a worker thread."""

    #: Shown in messages (never a password).
    label: str
    #: What the lexical search is, for stats.
    lexical: str

    @abstractmethod
    def collection(self, name: str) -> CollectionInfo | None: ...

    @abstractmethod
    def create_collection(self, name: str, analyzer: str) -> None: ...

    @abstractmethod
    def documents(self, collection: str) -> dict[str, tuple[str, str, str]]:
        """doc key -> (content hash, version, source)."""

    @abstractmethod
    def replace_document(
        self, collection: str, document: DocumentRecord, chunks: Sequence[ChunkRecord]
    ) -> None: ...

    @abstractmethod
    def set_version(self, collection: str, key: str, version: str) -> None: ...

    @abstractmethod
    def delete_documents(self, collection: str, keys: Sequence[str]) -> int: ...

    @abstractmethod
    def drop_collection(self, collection: str) -> int: ...

    @abstractmethod
    def texts(self, collection: str) -> list[str]: ...

    @abstractmethod
    def unembedded(self, collection: str, space: str, limit: int) -> list[tuple[int, str]]: ...

    @abstractmethod
    def count_unembedded(self, collection: str, space: str) -> int: ...

    @abstractmethod
    def store_vectors(
        self, collection: str, space: str, items: Sequence[tuple[int, bytes]]
    ) -> None: ...

    @abstractmethod
    def save_embedder(self, collection: str, identity: str, state: bytes | None) -> None: ...

    @abstractmethod
    def terms(self, collection: str) -> tuple[list[int], list[str]]: ...

    @abstractmethod
    def vectors(self, collection: str, space: str) -> tuple[list[int], list[bytes]]: ...

    @abstractmethod
    def metadata(self, collection: str) -> tuple[list[int], list[dict[str, Any]]]: ...

    @abstractmethod
    def keyword(self, collection: str, terms: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """Chunk ids and scores (higher is better) of the database's full-text search."""

    @abstractmethod
    def chunks(self, ids: Sequence[int]) -> dict[int, StoredChunk]: ...

    @abstractmethod
    def generation(self, collection: str) -> int: ...

    @abstractmethod
    def stats(self, collection: str) -> dict[str, Any]: ...

    @abstractmethod
    def close(self) -> None: ...


# -- shared SQL -------------------------------------------------------------------------


class SQLIndex(IndexStore):
    """What SQLite and PostgreSQL do alike, written once with ``?`` placeholders (a
    dialect converts them). A dialect provides transactions (``_write``, ``_read``),
    the full-text index (``_index_terms``, ``_unindex``, ``keyword``) and bytes."""

    def _sql(self, text: str) -> str:
        return text

    @abstractmethod
    def _write(self) -> AbstractContextManager[Any]: ...

    @abstractmethod
    def _read(self) -> AbstractContextManager[Any]: ...

    @abstractmethod
    def _insert_chunk(self, c: Any, collection: str, key: str, chunk: ChunkRecord) -> None: ...

    @abstractmethod
    def _unindex(self, c: Any, collection: str, key: str | None) -> None:
        """Remove from the full-text index the chunks of ``key`` (None: all of ``collection``)."""

    def _run(self, c: Any, text: str, params: Sequence[Any] = ()) -> Any:
        return c.execute(self._sql(text), tuple(params))

    def _bump(self, c: Any, collection: str) -> None:
        self._run(
            c,
            "UPDATE rag_collections SET generation = generation + 1, updated_at = ? "
            "WHERE collection = ?",
            (time.time(), collection),
        )

    def collection(self, name: str) -> CollectionInfo | None:
        with self._read() as c:
            row = self._run(
                c,
                "SELECT c.analyzer, c.embedder, s.state, c.generation FROM rag_collections c "
                "LEFT JOIN rag_embedder_states s ON s.collection = c.collection "
                "WHERE c.collection = ?",
                (name,),
            ).fetchone()
        if row is None:
            return None
        state = bytes(row[2]) if row[2] is not None else None
        return CollectionInfo(row[0], row[1], state, int(row[3]))

    def create_collection(self, name: str, analyzer: str) -> None:
        with self._write() as c:
            self._run(
                c,
                "INSERT INTO rag_collections (collection, analyzer, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (collection) DO NOTHING",
                (name, analyzer, time.time()),
            )

    def documents(self, collection: str) -> dict[str, tuple[str, str, str]]:
        with self._read() as c:
            rows = self._run(
                c,
                "SELECT doc_key, content_hash, version, source FROM rag_documents "
                "WHERE collection = ?",
                (collection,),
            ).fetchall()
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    def _delete_document(self, c: Any, collection: str, key: str) -> None:
        self._unindex(c, collection, key)
        self._run(
            c, "DELETE FROM rag_chunks WHERE collection = ? AND doc_key = ?", (collection, key)
        )

    def replace_document(
        self, collection: str, document: DocumentRecord, chunks: Sequence[ChunkRecord]
    ) -> None:
        with self._write() as c:
            self._delete_document(c, collection, document.key)
            for chunk in chunks:
                self._insert_chunk(c, collection, document.key, chunk)
            self._run(
                c,
                "INSERT INTO rag_documents (collection, doc_key, source, content_hash, version, "
                "title, metadata, chunks, indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (collection, doc_key) DO UPDATE SET source = excluded.source, "
                "content_hash = excluded.content_hash, version = excluded.version, "
                "title = excluded.title, metadata = excluded.metadata, chunks = excluded.chunks, "
                "indexed_at = excluded.indexed_at",
                (
                    collection,
                    document.key,
                    document.source,
                    document.content_hash,
                    document.version,
                    document.title,
                    _dumps(document.metadata),
                    len(chunks),
                    time.time(),
                ),
            )
            self._bump(c, collection)

    def set_version(self, collection: str, key: str, version: str) -> None:
        with self._write() as c:
            self._run(
                c,
                "UPDATE rag_documents SET version = ? WHERE collection = ? AND doc_key = ?",
                (version, collection, key),
            )

    def delete_documents(self, collection: str, keys: Sequence[str]) -> int:
        if not keys:
            return 0
        with self._write() as c:
            for key in keys:
                self._delete_document(c, collection, key)
                self._run(
                    c,
                    "DELETE FROM rag_documents WHERE collection = ? AND doc_key = ?",
                    (collection, key),
                )
            self._bump(c, collection)
        return len(keys)

    def drop_collection(self, collection: str) -> int:
        with self._write() as c:
            count = self._run(
                c, "SELECT COUNT(*) FROM rag_documents WHERE collection = ?", (collection,)
            ).fetchone()[0]
            self._unindex(c, collection, None)
            for table in ("rag_chunks", "rag_documents", "rag_embedder_states", "rag_collections"):
                self._run(c, f"DELETE FROM {table} WHERE collection = ?", (collection,))
        return int(count)

    def texts(self, collection: str) -> list[str]:
        with self._read() as c:
            rows = self._run(
                c, "SELECT text FROM rag_chunks WHERE collection = ? ORDER BY id", (collection,)
            ).fetchall()
        return [r[0] for r in rows]

    _UNEMBEDDED = "collection = ? AND (vector IS NULL OR vector_space IS DISTINCT FROM ?)"

    def unembedded(self, collection: str, space: str, limit: int) -> list[tuple[int, str]]:
        with self._read() as c:
            rows = self._run(
                c,
                f"SELECT id, text FROM rag_chunks WHERE {self._UNEMBEDDED} ORDER BY id LIMIT ?",
                (collection, space, limit),
            ).fetchall()
        return [(int(r[0]), r[1]) for r in rows]

    def count_unembedded(self, collection: str, space: str) -> int:
        with self._read() as c:
            row = self._run(
                c, f"SELECT COUNT(*) FROM rag_chunks WHERE {self._UNEMBEDDED}", (collection, space)
            ).fetchone()
        return int(row[0])

    def store_vectors(
        self, collection: str, space: str, items: Sequence[tuple[int, bytes]]
    ) -> None:
        with self._write() as c:
            for chunk_id, blob in items:
                self._run(
                    c,
                    "UPDATE rag_chunks SET vector = ?, vector_space = ? WHERE id = ?",
                    (blob, space, chunk_id),
                )
            self._bump(c, collection)

    def save_embedder(self, collection: str, identity: str, state: bytes | None) -> None:
        with self._write() as c:
            self._run(
                c,
                "UPDATE rag_collections SET embedder = ? WHERE collection = ?",
                (identity, collection),
            )
            self._run(
                c,
                "INSERT INTO rag_embedder_states (collection, state) VALUES (?, ?) "
                "ON CONFLICT (collection) DO UPDATE SET state = excluded.state",
                (collection, state),
            )
            self._bump(c, collection)

    def terms(self, collection: str) -> tuple[list[int], list[str]]:
        with self._read() as c:
            rows = self._run(
                c,
                "SELECT id, terms FROM rag_chunks WHERE collection = ? ORDER BY id",
                (collection,),
            ).fetchall()
        return [int(r[0]) for r in rows], [r[1] for r in rows]

    def vectors(self, collection: str, space: str) -> tuple[list[int], list[bytes]]:
        with self._read() as c:
            rows = self._run(
                c,
                "SELECT id, vector FROM rag_chunks WHERE collection = ? AND vector_space = ? "
                "ORDER BY id",
                (collection, space),
            ).fetchall()
        return [int(r[0]) for r in rows], [bytes(r[1]) for r in rows]

    _JOINED = (
        "FROM rag_chunks c JOIN rag_documents d "
        "ON d.collection = c.collection AND d.doc_key = c.doc_key "
    )

    def metadata(self, collection: str) -> tuple[list[int], list[dict[str, Any]]]:
        with self._read() as c:
            rows = self._run(
                c,
                "SELECT c.id, c.metadata, d.metadata, c.doc_key, c.heading, c.page "
                f"{self._JOINED}WHERE c.collection = ? ORDER BY c.id",
                (collection,),
            ).fetchall()
        return [int(r[0]) for r in rows], [_merge(r[2], r[1], r[3], r[4], r[5]) for r in rows]

    def chunks(self, ids: Sequence[int]) -> dict[int, StoredChunk]:
        if not ids:
            return {}
        marks = ", ".join("?" * len(ids))
        with self._read() as c:
            rows = self._run(
                c,
                "SELECT c.id, c.doc_key, c.position, c.start_char, c.end_char, c.text, c.heading, "
                f"c.page, c.metadata, d.metadata, d.title {self._JOINED}WHERE c.id IN ({marks})",
                [int(i) for i in ids],
            ).fetchall()
        return {
            int(r[0]): StoredChunk(
                int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], _merge(r[9], r[8]), r[10]
            )
            for r in rows
        }

    def generation(self, collection: str) -> int:
        with self._read() as c:
            row = self._run(
                c, "SELECT generation FROM rag_collections WHERE collection = ?", (collection,)
            ).fetchone()
        return int(row[0]) if row else -1

    def stats(self, collection: str) -> dict[str, Any]:
        with self._read() as c:
            documents = self._run(
                c, "SELECT COUNT(*) FROM rag_documents WHERE collection = ?", (collection,)
            ).fetchone()[0]
            row = self._run(
                c,
                "SELECT COUNT(*), COUNT(vector), COALESCE(SUM(LENGTH(text) + LENGTH(terms) + "
                "LENGTH(metadata)), 0), COALESCE(SUM(LENGTH(vector)), 0) FROM rag_chunks "
                "WHERE collection = ?",
                (collection,),
            ).fetchone()
        return {
            "documents": int(documents),
            "chunks": int(row[0]),
            "embedded": int(row[1]),
            "text_bytes": int(row[2]),
            "vector_bytes": int(row[3]),
        }


# -- SQLite -----------------------------------------------------------------------------

_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS rag_collections (
    collection TEXT PRIMARY KEY,
    analyzer TEXT NOT NULL,
    embedder TEXT NOT NULL DEFAULT '',
    generation INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL
);
-- Apart from rag_collections: a row holding a large state would make every read of
-- the small generation counter walk the state's overflow pages (4 ms a query).
CREATE TABLE IF NOT EXISTS rag_embedder_states (
    collection TEXT PRIMARY KEY,
    state BLOB
);
CREATE TABLE IF NOT EXISTS rag_documents (
    collection TEXT NOT NULL,
    doc_key TEXT NOT NULL,
    source TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    version TEXT NOT NULL DEFAULT '',
    title TEXT NOT NULL DEFAULT '',
    metadata TEXT NOT NULL DEFAULT '{}',
    chunks INTEGER NOT NULL,
    indexed_at REAL NOT NULL,
    PRIMARY KEY (collection, doc_key)
);
CREATE TABLE IF NOT EXISTS rag_chunks (
    id INTEGER PRIMARY KEY,
    collection TEXT NOT NULL,
    doc_key TEXT NOT NULL,
    position INTEGER NOT NULL,
    start_char INTEGER NOT NULL,
    end_char INTEGER NOT NULL,
    heading TEXT NOT NULL DEFAULT '',
    page INTEGER,
    text TEXT NOT NULL,
    terms TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    vector BLOB,
    vector_space TEXT,
    UNIQUE (collection, doc_key, position)
);
CREATE INDEX IF NOT EXISTS rag_chunks_by_collection ON rag_chunks (collection, id);
CREATE VIRTUAL TABLE IF NOT EXISTS rag_fts USING fts5(terms, tokenize = 'unicode61');
"""

# One connection per database file per process: SQLite has one writer at a time
# anyway, and the store's own connections wait for ours through the busy timeout.
_sqlite_connections: dict[str, tuple[sqlite3.Connection, threading.RLock]] = {}
_sqlite_lock = threading.Lock()
_memory_numbers = itertools.count(1)


def _private_file(path: Path) -> None:
    """A new database is created 0600 in a 0700 directory, as koboi's store is."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)


class SQLiteIndex(SQLIndex):
    lexical = "SQLite FTS5 (bm25)"

    def __init__(self, path: Path | None) -> None:
        """``path``: the database file; None for a private in-memory database."""
        self.path = path
        if path is None:
            # A label of its own: in-memory caches are keyed by it (retrieval.Memory).
            self.label = f"in-memory SQLite database #{next(_memory_numbers)}"
            self._connection = sqlite3.connect(":memory:", check_same_thread=False)
            self._lock = threading.RLock()
            self._connection.isolation_level = None
            self._connection.executescript(_SQLITE_SCHEMA)
            return
        self.label = str(path)
        key = os.path.realpath(path)
        with _sqlite_lock:
            found = _sqlite_connections.get(key)
            if found is None:
                try:
                    _private_file(path)
                    connection = sqlite3.connect(path, check_same_thread=False, timeout=30)
                    connection.isolation_level = None  # we say BEGIN ourselves
                    connection.execute("PRAGMA journal_mode = WAL")
                    connection.execute("PRAGMA synchronous = NORMAL")
                    connection.execute("PRAGMA busy_timeout = 30000")
                    connection.executescript(_SQLITE_SCHEMA)
                except sqlite3.Error as exc:
                    raise IndexStoreError(f"cannot open the index database {path}: {exc}") from None
                found = (connection, threading.RLock())
                _sqlite_connections[key] = found
            self._connection, self._lock = found

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            connection = self._connection
            try:
                connection.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise IndexStoreError(f"the index database {self.label} is busy: {exc}") from None
            try:
                yield connection
            except BaseException:  # any failure, a cancellation too: nothing half-written stays
                connection.execute("ROLLBACK")
                raise
            else:
                connection.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._connection

    def _insert_chunk(self, c: Any, collection: str, key: str, chunk: ChunkRecord) -> None:
        cursor = c.execute(
            f"INSERT INTO rag_chunks ({CHUNK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            chunk_row(collection, key, chunk),
        )
        c.execute(
            "INSERT INTO rag_fts (rowid, terms) VALUES (?, ?)", (cursor.lastrowid, chunk.terms)
        )

    def _unindex(self, c: Any, collection: str, key: str | None) -> None:
        if key is None:
            c.execute(
                "DELETE FROM rag_fts WHERE rowid IN (SELECT id FROM rag_chunks WHERE collection = ?)",
                (collection,),
            )
        else:
            c.execute(
                "DELETE FROM rag_fts WHERE rowid IN "
                "(SELECT id FROM rag_chunks WHERE collection = ? AND doc_key = ?)",
                (collection, key),
            )

    def keyword(self, collection: str, terms: Sequence[str], limit: int) -> list[tuple[int, float]]:
        if not terms:
            return []
        query = " OR ".join('"' + t.replace('"', '""') + '"' for t in dict.fromkeys(terms))
        with self._read() as c:
            try:
                rows = c.execute(
                    "SELECT f.rowid, -bm25(rag_fts) AS score FROM rag_fts f "
                    "JOIN rag_chunks c ON c.id = f.rowid "
                    "WHERE rag_fts MATCH ? AND c.collection = ? ORDER BY bm25(rag_fts) LIMIT ?",
                    (query, collection, limit),
                ).fetchall()
            except sqlite3.Error as exc:
                raise IndexStoreError(f"the full-text search failed: {exc}") from None
        return [(r[0], float(r[1])) for r in rows]

    def close(self) -> None:
        if self.path is None:
            self._connection.close()


def _merge(
    document: str | None,
    chunk: str | None,
    key: str | None = None,
    heading: str | None = None,
    page: int | None = None,
) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    if document:
        merged.update(json.loads(document))
    if chunk:
        merged.update(json.loads(chunk))
    if key is not None:
        merged.setdefault("source", key)
    if heading:
        merged.setdefault("heading", heading)
    if page is not None:
        merged.setdefault("page", page)
    return merged
