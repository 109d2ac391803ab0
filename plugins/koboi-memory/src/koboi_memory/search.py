"""Ranking facts for a query: BM25 over words, cosine over vectors, fused.

BM25 is kept here as a small inverted index that facts join and leave one at a
time (a library such as bm25s rebuilds its matrices on each change, and memory
changes on every stored fact); vectors are a numpy matrix. With both, the two
rankings are fused by reciprocal rank (k = 60), the method that measured best on
both test collections of koboi's retrieval notes.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

_WORD = re.compile(r"[\w][\w'-]*", re.UNICODE)
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "will",
        "with",
        "you",
        "your",
    ]
)
K1, B = 1.2, 0.75
RRF_K = 60


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.casefold()) if w not in _STOP]


@dataclass
class LexicalIndex:
    """BM25 over a changing set of documents, by id."""

    postings: dict[str, dict[str, int]] = field(default_factory=dict)
    lengths: dict[str, int] = field(default_factory=dict)
    total_length: int = 0

    def add(self, doc_id: str, text: str) -> None:
        if doc_id in self.lengths:
            self.remove(doc_id)
        terms = Counter(words(text))
        for term, count in terms.items():
            self.postings.setdefault(term, {})[doc_id] = count
        length = sum(terms.values())
        self.lengths[doc_id] = length
        self.total_length += length

    def remove(self, doc_id: str) -> None:
        length = self.lengths.pop(doc_id, None)
        if length is None:
            return
        self.total_length -= length
        for term in list(self.postings):
            docs = self.postings[term]
            if docs.pop(doc_id, None) is not None and not docs:
                del self.postings[term]

    def scores(self, query: str) -> dict[str, float]:
        count = len(self.lengths)
        if not count:
            return {}
        average = self.total_length / count or 1.0
        scores: dict[str, float] = {}
        for term in set(words(query)):
            docs = self.postings.get(term)
            if not docs:
                continue
            idf = math.log(1 + (count - len(docs) + 0.5) / (len(docs) + 0.5))
            for doc_id, frequency in docs.items():
                norm = frequency + K1 * (1 - B + B * self.lengths[doc_id] / average)
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * frequency * (K1 + 1) / norm
        return scores


def cosine_scores(
    matrix: npt.NDArray[np.float32], query: Sequence[float]
) -> npt.NDArray[np.float32]:
    """Cosine of each (normalised) row with ``query``."""
    import numpy as np

    vector = np.asarray(query, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    if norm == 0.0 or matrix.size == 0:
        return np.zeros(matrix.shape[0], dtype=np.float32)
    return matrix @ (vector / norm)


def fuse(rankings: Sequence[Sequence[str]]) -> list[tuple[str, float]]:
    """Reciprocal rank fusion of several rankings (best first)."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def top(scores: dict[str, float], k: int) -> list[str]:
    """The ``k`` best ids (ties broken by id, so results never depend on insertion order)."""
    return [d for d, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]]
