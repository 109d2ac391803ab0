"""Retrievers over one collection: keyword, BM25, semantic and hybrid.

- ``keyword``: the database's own full-text search over the analysed terms
  (SQLite FTS5's ``bm25()``, PostgreSQL's ``ts_rank_cd``): nothing held in memory.
- ``bm25``: Okapi BM25 (bm25s, sparse matrices; Lucene's variant, k1 = 1.5,
  b = 0.75) over the same terms, built in memory from the index and kept until the
  collection changes: the fast lexical retriever.
- ``semantic``: cosine similarity of the query's embedding with every chunk's
  (a numpy matrix product over the unit-length vectors of the index).
- ``hybrid``: reciprocal rank fusion of a lexical ranking (``bm25`` by default)
  and the semantic one: score = Σ weight / (k + rank), ranks from 1.

Metadata filters are applied *before* ranking for ``bm25``, ``semantic`` and
``hybrid`` (a boolean mask over the chunks), and to a deeper candidate list for
``keyword``, so a filter never returns fewer results than exist.

In-memory state (the BM25 matrix, the vectors, the chunks' metadata) is kept per
index and collection and reloaded when the collection's ``generation`` moved.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from koboi_rag.index import IndexStore

Ranking = list[tuple[int, float]]  # chunk ids with scores, best first


@dataclass
class _Loaded:
    generation: int
    ids: np.ndarray[Any, Any]
    position: dict[int, int]
    bm25: Any = None
    vectors: np.ndarray[Any, Any] | None = None
    vector_ids: np.ndarray[Any, Any] | None = None
    vector_space: str = ""
    metadata: list[dict[str, Any]] | None = None


class Memory:
    """What one process keeps in memory of one collection, reloaded on change."""

    def __init__(self) -> None:
        self._loaded: dict[tuple[str, str], _Loaded] = {}
        self._lock = threading.Lock()

    def get(self, index: IndexStore, collection: str) -> _Loaded:
        key = (index.label, collection)
        generation = index.generation(collection)
        with self._lock:
            found = self._loaded.get(key)
            if found is not None and found.generation == generation:
                return found
            ids, terms = index.terms(collection)
            loaded = _Loaded(
                generation=generation,
                ids=np.array(ids, dtype=np.int64),
                position={chunk_id: n for n, chunk_id in enumerate(ids)},
            )
            loaded.bm25 = _build_bm25(terms) if terms else None
            self._loaded[key] = loaded
            return loaded

    def vectors(
        self, index: IndexStore, collection: str, space: str
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        loaded = self.get(index, collection)
        with self._lock:
            if loaded.vectors is None or loaded.vector_space != space:
                ids, blobs = index.vectors(collection, space)
                if blobs:
                    matrix = np.vstack([np.frombuffer(b, dtype=np.float32) for b in blobs])
                else:
                    matrix = np.zeros((0, 0), dtype=np.float32)
                loaded.vectors = matrix
                loaded.vector_ids = np.array(ids, dtype=np.int64)
                loaded.vector_space = space
            assert loaded.vector_ids is not None
            return loaded.vector_ids, loaded.vectors

    def metadata(self, index: IndexStore, collection: str) -> list[dict[str, Any]]:
        loaded = self.get(index, collection)
        with self._lock:
            if loaded.metadata is None:
                ids, metadata = index.metadata(collection)
                by_id = dict(zip(ids, metadata, strict=True))
                loaded.metadata = [by_id.get(int(i), {}) for i in loaded.ids]
            return loaded.metadata

    def forget(self) -> None:
        with self._lock:
            self._loaded.clear()


def _build_bm25(terms: Sequence[str]) -> Any:
    import bm25s  # type: ignore[import-untyped]

    retriever = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    # Terms are already analysed; bm25s only maps them to ids. An empty chunk gets a
    # placeholder term no query can contain, so ids stay aligned.
    corpus = [t.split() or ["\x00"] for t in terms]
    retriever.index(_tokenized(corpus), show_progress=False)
    return retriever


def _tokenized(corpus: list[list[str]]) -> Any:
    from bm25s.tokenization import Tokenized  # type: ignore[import-untyped]

    vocabulary: dict[str, int] = {}
    ids = [[vocabulary.setdefault(t, len(vocabulary)) for t in doc] for doc in corpus]
    return Tokenized(ids=ids, vocab=vocabulary)


def _top(scores: np.ndarray[Any, Any], ids: np.ndarray[Any, Any], limit: int) -> Ranking:
    if scores.size == 0 or limit <= 0:
        return []
    limit = min(limit, scores.size)
    top = np.argpartition(-scores, limit - 1)[:limit]
    # Ties broken by chunk id: the same query always ranks the same way.
    order = np.lexsort((ids[top], -scores[top]))
    return [(int(ids[top[i]]), float(scores[top[i]])) for i in order]


def bm25_ranking(
    memory: Memory,
    index: IndexStore,
    collection: str,
    terms: Sequence[str],
    limit: int,
    allowed: np.ndarray[Any, Any] | None,
) -> Ranking:
    loaded = memory.get(index, collection)
    if loaded.bm25 is None or not terms:
        return []
    vocabulary = loaded.bm25.vocab_dict
    known = [vocabulary[t] for t in terms if t in vocabulary]
    if not known:
        return []
    scores = np.asarray(loaded.bm25.get_scores(known), dtype=np.float32)
    keep = scores > 0
    if allowed is not None:
        keep &= allowed
    return _top(scores[keep], loaded.ids[keep], limit)


def semantic_ranking(
    memory: Memory,
    index: IndexStore,
    collection: str,
    query_vector: Sequence[float],
    space: str,
    limit: int,
    allowed: np.ndarray[Any, Any] | None,
) -> Ranking:
    ids, matrix = memory.vectors(index, collection, space)
    if matrix.size == 0:
        return []
    query = np.asarray(query_vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    if norm == 0 or query.shape[0] != matrix.shape[1]:
        return []
    scores = matrix @ (query / norm)
    if allowed is not None:
        loaded = memory.get(index, collection)
        mask = np.array(
            [
                bool(allowed[loaded.position[int(i)]]) if int(i) in loaded.position else False
                for i in ids
            ]
        )
        return _top(scores[mask], ids[mask], limit)
    return _top(scores, ids, limit)


def keyword_ranking(
    memory: Memory,
    index: IndexStore,
    collection: str,
    terms: Sequence[str],
    limit: int,
    allowed: np.ndarray[Any, Any] | None,
) -> Ranking:
    if allowed is None:
        return index.keyword(collection, terms, limit)
    # Filtered: read deeper, then keep the allowed ones.
    loaded = memory.get(index, collection)
    depth = max(limit * 10, 1000)
    found = index.keyword(collection, terms, depth)
    return [
        (chunk_id, score)
        for chunk_id, score in found
        if chunk_id in loaded.position and allowed[loaded.position[chunk_id]]
    ][:limit]


def fuse(rankings: Sequence[tuple[Ranking, float]], k: int, limit: int) -> Ranking:
    """Weighted reciprocal rank fusion: Σ weight / (k + rank)."""
    scores: dict[int, float] = {}
    for ranking, weight in rankings:
        if weight == 0:
            continue
        for rank, (chunk_id, _) in enumerate(ranking, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (k + rank)
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return ordered[:limit]


def filter_mask(
    memory: Memory,
    index: IndexStore,
    collection: str,
    predicate: Callable[[Mapping[str, Any]], bool] | None,
) -> np.ndarray[Any, Any] | None:
    if predicate is None:
        return None
    metadata = memory.metadata(index, collection)
    return np.array([predicate(m) for m in metadata], dtype=bool)
