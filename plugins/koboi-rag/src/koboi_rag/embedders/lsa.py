"""LSA: the offline default embedder. It learns its space from the collection.

Latent semantic analysis: a TF-IDF matrix of the collection's chunks (sublinear
term frequency, smoothed IDF, rows of unit length, the same analyser as the
lexical index), reduced to ``dimensions`` latent dimensions by a truncated SVD
(randomized, with a fixed seed and fixed signs, so one collection always gives
one space). A text is embedded by projecting its TF-IDF row onto that space.
No model, no download: numpy and scipy's sparse matrices.

The fitted space (vocabulary, IDF, the projection) is exported into the index
(:meth:`export_state`), so documents added later are folded into the same space
and queries after a restart are embedded as the documents were. koboi-rag fits
again (and embeds everything again) when the collection has grown past
``refit_growth`` times the size it was fitted on.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from koboi.errors import KoboiError
from koboi_rag.analysis import Analyzer

_KNOWN = {
    "dimensions",
    "language",
    "min_df",
    "max_features",
    "seed",
    "refit_growth",
    "power_iterations",
}


class LSAEmbedder:
    """TF-IDF + truncated SVD over the collection."""

    def __init__(
        self,
        *,
        dimensions: int = 200,
        language: str = "en",
        min_df: int = 1,
        max_features: int = 50_000,
        seed: int = 0,
        refit_growth: float = 2.0,
        power_iterations: int = 4,
    ) -> None:
        self.wanted = dimensions
        self.language = language
        self.analyzer = Analyzer(language)
        self.min_df = min_df
        self.max_features = max_features
        self.seed = seed
        self.refit_growth = refit_growth
        self.power_iterations = power_iterations
        self._vocabulary: dict[str, int] = {}
        self._idf: np.ndarray[Any, Any] | None = None
        self._components: np.ndarray[Any, Any] | None = None  # k x V
        self._projection: np.ndarray[Any, Any] | None = None  # its transpose, contiguous
        self._identity = ""
        self.fitted_on = 0

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> LSAEmbedder:
        unknown = sorted(set(options) - _KNOWN)
        if unknown:
            raise KoboiError(
                f"rag.embedder (lsa): unknown option(s) {', '.join(unknown)}; it takes "
                f"{', '.join(sorted(_KNOWN))}"
            )
        try:
            return cls(**{k: options[k] for k in options})
        except (TypeError, ValueError) as exc:
            raise KoboiError(f"rag.embedder (lsa): {exc}") from None

    # -- the Embedder contract ------------------------------------------------------

    @property
    def dimensions(self) -> int:
        if self._components is None:
            raise KoboiError("the LSA embedder is not fitted yet (fit it on the collection first)")
        return int(self._components.shape[0])

    @property
    def identity(self) -> str:
        return self._identity

    async def fit(self, corpus: Sequence[str]) -> None:
        import anyio.to_thread

        await anyio.to_thread.run_sync(self._fit, list(corpus))

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._project(texts).tolist()  # type: ignore[no-any-return]

    async def embed_query(self, text: str) -> list[float]:
        return self._project([text])[0].tolist()  # type: ignore[no-any-return]

    # -- fitted state -----------------------------------------------------------------

    def export_state(self) -> bytes:
        if self._components is None or self._idf is None:
            raise KoboiError("the LSA embedder has no fitted state to export")
        buffer = io.BytesIO()
        terms = sorted(self._vocabulary, key=self._vocabulary.__getitem__)
        np.savez(
            buffer,
            terms=np.array(terms, dtype=object).astype(str),
            idf=self._idf,
            components=self._components,
            fitted_on=np.array([self.fitted_on]),
        )
        return buffer.getvalue()

    def import_state(self, state: bytes) -> None:
        with np.load(io.BytesIO(state), allow_pickle=False) as data:
            terms = [str(t) for t in data["terms"]]
            self._vocabulary = {t: i for i, t in enumerate(terms)}
            self._idf = data["idf"].astype(np.float32)
            self._components = data["components"].astype(np.float32)
            self._projection = None
            self.fitted_on = int(data["fitted_on"][0])
        self._identity = self._digest()

    def needs_refit(self, collection_size: int) -> bool:
        """True when the collection grew past ``refit_growth`` times its size at fit time."""
        return self.fitted_on > 0 and collection_size > self.fitted_on * self.refit_growth

    # -- work -----------------------------------------------------------------------------

    def _digest(self) -> str:
        # Of the arrays, not of the npz container (which holds a time stamp).
        assert self._idf is not None and self._components is not None
        digest = hashlib.sha256()
        digest.update(
            "\x00".join(sorted(self._vocabulary, key=self._vocabulary.__getitem__)).encode()
        )
        digest.update(self._idf.astype(np.float32).tobytes())
        digest.update(self._components.astype(np.float32).tobytes())
        return "lsa:" + digest.hexdigest()[:16]

    def _counts(self, texts: Sequence[str]) -> Any:
        from scipy import sparse  # type: ignore[import-untyped]

        rows, cols, vals = [], [], []
        vocabulary = self._vocabulary
        for row, text in enumerate(texts):
            counts: dict[int, int] = {}
            for term in self.analyzer.terms(text):
                column = vocabulary.get(term)
                if column is not None:
                    counts[column] = counts.get(column, 0) + 1
            for column, count in counts.items():
                rows.append(row)
                cols.append(column)
                vals.append(1.0 + math.log(count))  # sublinear term frequency
        return sparse.csr_matrix(
            (np.array(vals, dtype=np.float32), (rows, cols)),
            shape=(len(texts), len(vocabulary)),
            dtype=np.float32,
        )

    def _tfidf(self, texts: Sequence[str]) -> Any:
        from scipy import sparse

        assert self._idf is not None
        matrix = self._counts(texts) @ sparse.diags(self._idf)
        norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        return sparse.diags(1.0 / norms) @ matrix

    def _fit(self, corpus: list[str]) -> None:
        if not corpus:
            raise KoboiError("cannot fit the LSA embedder on an empty collection")
        document_frequency: dict[str, int] = {}
        for text in corpus:
            for term in set(self.analyzer.terms(text)):
                document_frequency[term] = document_frequency.get(term, 0) + 1
        kept = [t for t, df in document_frequency.items() if df >= self.min_df]
        kept.sort(key=lambda t: (-document_frequency[t], t))
        kept = sorted(kept[: self.max_features])
        if not kept:
            raise KoboiError("cannot fit the LSA embedder: the collection has no indexable words")
        self._vocabulary = {t: i for i, t in enumerate(kept)}
        n = len(corpus)
        self._idf = np.array(
            [math.log((1 + n) / (1 + document_frequency[t])) + 1.0 for t in kept],
            dtype=np.float32,
        )
        matrix = self._tfidf(corpus)
        k = max(1, min(self.wanted, n - 1 if n > 1 else 1, len(kept) - 1 if len(kept) > 1 else 1))
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

        # One BLAS thread: on a machine whose cores are shared, OpenBLAS's threads
        # fight each other (a QR of 7000 x 210 took 5 s with two threads under load,
        # 0.46 s with one).
        with threadpool_limits(limits=1, user_api="blas"):
            self._components = _truncated_svd(matrix, k, self.seed, self.power_iterations)
        self._projection = None
        self.fitted_on = n
        self._identity = self._digest()

    def _project(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        if self._components is None:
            raise KoboiError("the LSA embedder is not fitted yet (fit it on the collection first)")
        if self._projection is None or self._projection.shape[1] != self._components.shape[0]:
            # Contiguous V x k: scipy would otherwise copy the transposed view on every query.
            self._projection = np.ascontiguousarray(self._components.T)
        projected = self._tfidf(texts) @ self._projection
        return np.asarray(projected, dtype=np.float32)


def _truncated_svd(matrix: Any, k: int, seed: int, power_iterations: int) -> np.ndarray[Any, Any]:
    """The top ``k`` right singular vectors of ``matrix`` (k x V), by the randomized
    range finder of Halko, Martinsson and Tropp, with fixed signs."""
    rng = np.random.default_rng(seed)
    width = min(k + 10, min(matrix.shape))
    omega = rng.standard_normal((matrix.shape[1], width)).astype(np.float32)
    sample = matrix @ omega
    basis, _ = np.linalg.qr(sample)
    for _ in range(power_iterations):
        back, _ = np.linalg.qr(matrix.T @ basis)
        basis, _ = np.linalg.qr(matrix @ back)
    small = np.asarray((matrix.T @ basis).T)  # basis' x matrix, without densifying the matrix
    _, _, vt = np.linalg.svd(small, full_matrices=False)
    components = vt[:k].astype(np.float32)
    # Fixed signs: the largest entry of each component is positive.
    flips = np.sign(components[np.arange(components.shape[0]), np.abs(components).argmax(axis=1)])
    flips[flips == 0] = 1.0
    fixed: np.ndarray[Any, Any] = components * flips[:, None]
    return fixed


def create_lsa(options: Mapping[str, Any]) -> LSAEmbedder:
    return LSAEmbedder.from_options(options)
