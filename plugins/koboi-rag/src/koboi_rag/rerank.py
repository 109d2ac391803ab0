"""Rerankers and query transforms.

- ``jina``: ``POST {base_url}/rerank`` (default ``https://api.jina.ai/v1``) with
  ``{"model", "query", "documents": [texts], "top_n", "return_documents": false}``;
  the answer's ``results`` are ``{"index", "relevance_score"}``.
- ``cohere``: ``POST {base_url}/rerank`` (default ``https://api.cohere.com/v2``) with
  ``{"model", "query", "documents": [texts], "top_n"}``; the same ``results``.
- ``llm``: the agent's own model ranks the passages, through a journaled side
  call (purpose ``rag.rerank``), so a resumed or replayed run gets the same order.

Query rewriting (``rag.rewrite``) and HyDE (``rag.hyde``) are side calls too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from koboi.errors import KoboiError
from koboi_rag.config import RerankSettings
from koboi_rag.hosted import api_key, post_json

_DEFAULTS = {
    "jina": ("https://api.jina.ai/v1", "jina-reranker-v2-base-multilingual", "JINA_API_KEY"),
    "cohere": ("https://api.cohere.com/v2", "rerank-v3.5", "COHERE_API_KEY"),
}
#: Largest batch each hosted API takes in one request.
_BATCH = {"jina": 2048, "cohere": 1000}

REWRITE_PROMPT = (
    "Rewrite the user's question as one short search query for a document index: keep the "
    "key terms, drop chit-chat. Answer with the query only."
)
HYDE_PROMPT = (
    "Write a short passage (3-5 sentences) that would answer the question, as it might appear "
    "in a reference document. Answer with the passage only."
)
RERANK_PROMPT = (
    "Rank the numbered passages by how well they answer the query. Answer with the passage "
    "numbers, most relevant first, separated by commas, and nothing else."
)


class ModelNeeded(KoboiError):
    """A search step needs the agent's model, and the search runs outside an agent."""


def needs_model(what: str) -> ModelNeeded:
    return ModelNeeded(
        f"{what} asks the agent's model (a journaled side call): search through the agent "
        "(the rag__search tool, or 'koboi rag search' without --direct)"
    )


async def rerank_hosted(
    settings: RerankSettings, query: str, texts: Sequence[str], top_n: int
) -> list[tuple[int, float]]:
    """Indices into ``texts`` with relevance scores, best first."""
    base_url, model, env = _DEFAULTS[settings.provider]
    url = (settings.base_url or base_url).rstrip("/") + "/rerank"
    key = api_key(settings.api_key, (env,), f"{settings.provider} API key")
    if not key:
        raise KoboiError(
            f"rag.rerank ({settings.provider}): no API key; set {env} or rag.rerank.api_key"
        )
    scored: list[tuple[int, float]] = []
    batch = _BATCH[settings.provider]
    for first in range(0, len(texts), batch):
        part = list(texts[first : first + batch])
        body: dict[str, Any] = {
            "model": settings.model or model,
            "query": query,
            "documents": part,
            "top_n": min(top_n, len(part)),
        }
        if settings.provider == "jina":
            body["return_documents"] = False
        answer = await post_json(
            url,
            body,
            what=f"rerank ({settings.provider})",
            key=key,
            key_hint=f"set {env} or rag.rerank.api_key",
            timeout=settings.timeout_seconds,
            max_retries=settings.max_retries,
        )
        results = answer.get("results") if isinstance(answer, dict) else None
        if not isinstance(results, list):
            raise KoboiError(f"rerank ({settings.provider}): {url} answered no 'results' list")
        for item in results:
            index, score = item.get("index"), item.get("relevance_score")
            if (
                not isinstance(index, int)
                or not 0 <= index < len(part)
                or not isinstance(score, int | float)
            ):
                raise KoboiError(
                    f"rerank ({settings.provider}): {url} answered a result without a valid "
                    "index and relevance_score"
                )
            scored.append((first + index, float(score)))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored[:top_n]


async def rerank_llm(
    model: Any, query: str, texts: Sequence[str], top_n: int
) -> list[tuple[int, float]]:
    """The agent's model orders the passages (side call ``rag.rerank``)."""
    passages = "\n\n".join(f"[{n}] {' '.join(t.split())[:1200]}" for n, t in enumerate(texts, 1))
    answer: str = await model.ask(
        f"Query: {query}\n\nPassages:\n{passages}", purpose="rag.rerank", system=RERANK_PROMPT
    )
    order: list[int] = []
    for number in re.findall(r"\d+", answer):
        index = int(number) - 1
        if 0 <= index < len(texts) and index not in order:
            order.append(index)
    # Passages the model left out keep their retrieval order, after the ones it ranked.
    order.extend(i for i in range(len(texts)) if i not in order)
    return [(index, 1.0 / rank) for rank, index in enumerate(order[:top_n], 1)]


async def rewrite_query(model: Any, query: str) -> str:
    rewritten = str(await model.ask(query, purpose="rag.rewrite", system=REWRITE_PROMPT)).strip()
    return rewritten.strip("\"'") or query


async def hypothetical_answer(model: Any, query: str) -> str:
    return str(await model.ask(query, purpose="rag.hyde", system=HYDE_PROMPT)).strip()
