"""Any OpenAI-compatible ``/v1/embeddings`` endpoint: OpenAI, Ollama, vLLM, llama.cpp…

``POST {base_url}/embeddings`` with ``{"model", "input": [texts], "encoding_format":
"float"}`` (and ``dimensions`` when configured), batched; the answer's ``data[i]
.embedding`` are put back in ``index`` order. The key comes from ``api_key`` or
``OPENAI_API_KEY`` (none is sent when neither is set: a local server needs none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from koboi.errors import KoboiError
from koboi_rag.hosted import HostedAPIError, api_key, post_json

_KNOWN = {
    "base_url",
    "model",
    "api_key",
    "dimensions",
    "batch_size",
    "timeout_seconds",
    "max_retries",
    "api_key_env",
}


class OpenAIEmbedder:
    def __init__(
        self,
        *,
        base_url: str = "https://api.openai.com/v1",
        model: str = "text-embedding-3-small",
        api_key: Any = None,
        api_key_env: str = "OPENAI_API_KEY",
        dimensions: int | None = None,
        batch_size: int = 96,
        timeout_seconds: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        self.url = base_url.rstrip("/") + "/embeddings"
        self.model = model
        self._key_env = api_key_env
        self._key = _resolve(api_key, api_key_env)
        self._requested = dimensions
        self._dimensions = dimensions
        self.batch_size = max(1, int(batch_size))
        self.timeout = float(timeout_seconds)
        self.max_retries = int(max_retries)

    @property
    def dimensions(self) -> int:
        if self._dimensions is None:
            raise KoboiError("the embeddings endpoint has not said its dimensions yet (call fit)")
        return self._dimensions

    @property
    def identity(self) -> str:
        return f"openai:{self.url}:{self.model}:{self._requested or ''}"

    def export_state(self) -> bytes:
        return b""

    def import_state(self, state: bytes) -> None:
        return None

    async def fit(self, corpus: Sequence[str]) -> None:
        # A pretrained model learns nothing; learn the dimensions if not configured.
        if self._dimensions is None:
            await self.embed_query(corpus[0] if corpus else "dimensions")

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for first in range(0, len(texts), self.batch_size):
            out.extend(await self._embed(list(texts[first : first + self.batch_size])))
        return out

    async def embed_query(self, text: str) -> list[float]:
        return (await self._embed([text]))[0]

    async def _embed(self, batch: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        if self._requested is not None:
            body["dimensions"] = self._requested
        answer = await post_json(
            self.url,
            body,
            what="embeddings",
            key=self._key,
            key_hint=f"set {self._key_env} or rag.embedder.api_key",
            timeout=self.timeout,
            max_retries=self.max_retries,
        )
        data = answer.get("data") if isinstance(answer, Mapping) else None
        if not isinstance(data, list) or len(data) != len(batch):
            raise HostedAPIError(
                f"embeddings: {self.url} answered {len(data) if isinstance(data, list) else 'no'} "
                f"embeddings for {len(batch)} inputs"
            )
        vectors: list[list[float] | None] = [None] * len(batch)
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, Mapping) else position
            vector = item.get("embedding") if isinstance(item, Mapping) else None
            if (
                not isinstance(vector, list)
                or not isinstance(index, int)
                or not 0 <= index < len(batch)
            ):
                raise HostedAPIError(
                    f"embeddings: {self.url} answered an item without a float embedding "
                    "(is encoding_format 'float' supported?)"
                )
            vectors[index] = [float(x) for x in vector]
        result = [v for v in vectors if v is not None]
        if len(result) != len(batch):
            raise HostedAPIError(f"embeddings: {self.url} answered an index twice")
        width = len(result[0])
        if self._dimensions is None:
            self._dimensions = width
        if any(len(v) != self._dimensions for v in result):
            raise HostedAPIError(
                f"embeddings: {self.url} answered vectors of {width} numbers; expected "
                f"{self._dimensions}"
            )
        return result


def _resolve(configured: Any, env_var: str) -> str:
    return api_key(configured, (env_var,), "embeddings API key")


def create_openai(options: Mapping[str, Any]) -> OpenAIEmbedder:
    unknown = sorted(set(options) - _KNOWN)
    if unknown:
        raise KoboiError(
            f"rag.embedder (openai): unknown option(s) {', '.join(unknown)}; it takes "
            f"{', '.join(sorted(_KNOWN))}"
        )
    try:
        return OpenAIEmbedder(**dict(options))
    except (TypeError, ValueError) as exc:
        raise KoboiError(f"rag.embedder (openai): {exc}") from None
