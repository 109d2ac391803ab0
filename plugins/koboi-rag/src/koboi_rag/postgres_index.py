"""The index on PostgreSQL: the same tables as on SQLite, full-text search by a
``tsvector`` column (over the analysed terms, with the ``simple`` configuration:
the analyser already stemmed them) and a GIN index, ranked by ``ts_rank_cd``.
Vectors are ``bytea`` (float32), scored with numpy like on SQLite.

Tables go where the connection's ``search_path`` puts them (a store URL with
``options=-csearch_path%3Dkoboi`` keeps them in schema ``koboi``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from koboi_rag.index import CHUNK_COLUMNS, ChunkRecord, IndexStoreError, SQLIndex, chunk_row

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rag_collections (
    collection TEXT PRIMARY KEY,
    analyzer TEXT NOT NULL,
    embedder TEXT NOT NULL DEFAULT '',
    generation BIGINT NOT NULL DEFAULT 0,
    updated_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS rag_embedder_states (
    collection TEXT PRIMARY KEY,
    state BYTEA
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
    indexed_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (collection, doc_key)
);
CREATE TABLE IF NOT EXISTS rag_chunks (
    id BIGSERIAL PRIMARY KEY,
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
    vector BYTEA,
    vector_space TEXT,
    tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', terms)) STORED,
    UNIQUE (collection, doc_key, position)
);
CREATE INDEX IF NOT EXISTS rag_chunks_by_collection ON rag_chunks (collection, id);
CREATE INDEX IF NOT EXISTS rag_chunks_tsv ON rag_chunks USING GIN (tsv);
"""
# Serialises schema creation across clients (CREATE ... IF NOT EXISTS races otherwise).
_SCHEMA_LOCK = 0x6B6F626F6972  # "koboir"


def psycopg_url(driver_url: str) -> str:
    """A SQLAlchemy-style URL (``postgresql+psycopg://``) as libpq takes it."""
    scheme, sep, rest = driver_url.partition("://")
    return "postgresql://" + rest if sep and scheme.startswith("postgres") else driver_url


class PostgresIndex(SQLIndex):
    lexical = "PostgreSQL full-text search (ts_rank_cd)"

    def __init__(self, url: str, label: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise IndexStoreError(
                "an index on PostgreSQL needs psycopg: install koboi-rag[postgres]"
            ) from None
        self.label = label
        self._lock = threading.RLock()
        try:
            self._connection = psycopg.connect(psycopg_url(url), autocommit=False)
            with self._connection.transaction():
                self._connection.execute(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})")
                self._connection.execute(_SCHEMA)
        except psycopg.Error as exc:
            raise IndexStoreError(f"cannot open the index in {label}: {exc}") from None

    @contextmanager
    def _write(self) -> Iterator[Any]:
        with self._lock, self._connection.transaction():
            yield self._connection

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self._lock, self._connection.transaction():
            yield self._connection

    def _sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def _insert_chunk(self, c: Any, collection: str, key: str, chunk: ChunkRecord) -> None:
        c.execute(
            f"INSERT INTO rag_chunks ({CHUNK_COLUMNS}) VALUES ({', '.join(['%s'] * 10)})",
            chunk_row(collection, key, chunk),
        )

    def _unindex(self, c: Any, collection: str, key: str | None) -> None:
        return None  # the tsvector is a column of the chunk: it goes with the row

    def keyword(self, collection: str, terms: Sequence[str], limit: int) -> list[tuple[int, float]]:
        words = [t for t in dict.fromkeys(terms) if t]
        if not words:
            return []
        # Each term quoted as a tsquery lexeme, OR-ed: any term matches, more score higher.
        query = " | ".join("'" + w.replace("'", "''").replace("\\", "\\\\") + "'" for w in words)
        with self._read() as c:
            rows = c.execute(
                "SELECT id, ts_rank_cd(tsv, q) AS score FROM rag_chunks, "
                "to_tsquery('simple', %s) q WHERE collection = %s AND tsv @@ q "
                "ORDER BY score DESC, id LIMIT %s",
                (query, collection, limit),
            ).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def close(self) -> None:
        self._connection.close()
