"""A deterministic hashing embedder, for tests only: no meaning, no model, no fit.

Each analysed term is hashed (BLAKE2b) to one of ``dimensions`` buckets with a
sign; a text is the sublinear count of its terms' buckets. Identical texts give
identical vectors on every machine; texts that share words are close. It is
what koboi's own tests use where an embedder must be fast and reproducible; for
retrieval quality use ``lsa`` (offline) or a real model.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from koboi.errors import KoboiError
from koboi_rag.analysis import Analyzer


class HashingEmbedder:
    def __init__(self, *, dimensions: int = 256, language: str = "en") -> None:
        if not isinstance(dimensions, int) or not 1 <= dimensions <= 65536:
            raise KoboiError("rag.embedder (hashing): dimensions must be a whole number 1-65536")
        self._dimensions = dimensions
        self.analyzer = Analyzer(language)
        #: Texts embedded so far (tests read it to prove what was, or was not, embedded).
        self.embedded = 0

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def identity(self) -> str:
        return f"hashing:{self._dimensions}:{self.analyzer.describe()}"

    def export_state(self) -> bytes:
        return b""

    def import_state(self, state: bytes) -> None:
        return None

    async def fit(self, corpus: Sequence[str]) -> None:
        return None

    def _vector(self, text: str) -> list[float]:
        counts: dict[int, float] = {}
        for term in self.analyzer.terms(text):
            digest = hashlib.blake2b(term.encode(), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            bucket = value % self._dimensions
            sign = 1.0 if (value >> 63) & 1 else -1.0
            counts[bucket] = counts.get(bucket, 0.0) + sign
        vector = [0.0] * self._dimensions
        for bucket, count in counts.items():
            vector[bucket] = math.copysign(1.0 + math.log(abs(count)), count) if count else 0.0
        return vector

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return [self._vector(t) for t in texts]

    async def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def create_hashing(options: Mapping[str, Any]) -> HashingEmbedder:
    unknown = sorted(set(options) - {"dimensions", "language"})
    if unknown:
        raise KoboiError(
            f"rag.embedder (hashing): unknown option(s) {', '.join(unknown)}; it takes "
            "dimensions, language"
        )
    return HashingEmbedder(**dict(options))
