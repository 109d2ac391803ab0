"""Hosted APIs against loopback servers speaking their real wire formats: an
OpenAI-compatible /v1/embeddings (the answers built with the official openai
package's own types, the request compared with what its client sends), Jina's and
Cohere's rerank APIs; and the agent's own model as reranker, query rewriter and HyDE
writer, through journaled side calls."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from openai.types import CreateEmbeddingResponse, Embedding
from openai.types.create_embedding_response import Usage

from koboi import KoboiAgent, PluginHost
from koboi.errors import KoboiError
from koboi_rag.embedders.openai import OpenAIEmbedder
from koboi_rag.engine import RagEngine
from koboi_testing.wire import Received, Reply, WireServer

from .conftest import write_docs


def embeddings_reply(request: Received) -> Reply:
    body = request.json()
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    data = [
        Embedding(object="embedding", index=i, embedding=[float(len(t)), float(t.count("e")), 1.0])
        for i, t in enumerate(texts)
    ]
    answer = CreateEmbeddingResponse(
        object="list",
        data=list(reversed(data)),
        model=body["model"],
        usage=Usage(prompt_tokens=len(texts), total_tokens=len(texts)),
    )
    return Reply.json(answer.model_dump())


@pytest.mark.slow
def test_openai_embeddings_wire_format_and_interop() -> None:
    import openai

    with WireServer() as server:
        server.handler = embeddings_reply
        embedder = OpenAIEmbedder(
            base_url=server.url + "/v1",
            model="text-embedding-3-small",
            api_key="sk-test-key-000000000000",
        )

        async def ours() -> list[list[float]]:
            await embedder.fit([])
            return await embedder.embed_documents(["one", "three", "sevens"])

        vectors = anyio.run(ours)
        assert vectors == [[3.0, 1.0, 1.0], [5.0, 2.0, 1.0], [6.0, 2.0, 1.0]]  # back in index order
        assert embedder.dimensions == 3

        async def theirs() -> None:
            client = openai.AsyncOpenAI(
                base_url=server.url + "/v1", api_key="sk-test-key-000000000000"
            )
            response = await client.embeddings.create(
                model="text-embedding-3-small",
                input=["one", "three", "sevens"],
                encoding_format="float",
            )
            assert [d.embedding for d in sorted(response.data, key=lambda d: d.index)] == vectors
            await client.close()

        anyio.run(theirs)
        ours_request, theirs_request = server.requests[-2], server.requests[-1]
        assert ours_request.path == theirs_request.path == "/v1/embeddings"
        assert ours_request.json() == theirs_request.json()
        assert ours_request.headers["authorization"] == "Bearer sk-test-key-000000000000"


@pytest.mark.slow
def test_embeddings_errors_are_one_line_without_the_key() -> None:
    with WireServer() as server:
        server.default = Reply.json(
            {"error": {"message": "Incorrect API key provided"}}, status=401
        )
        embedder = OpenAIEmbedder(
            base_url=server.url, api_key="sk-secret-value-1234567890abcd", max_retries=0
        )
        with pytest.raises(KoboiError) as caught:
            anyio.run(embedder.embed_query, "hello")
    message = str(caught.value)
    assert "refused the API key (status 401" in message and "OPENAI_API_KEY" in message
    assert "sk-secret" not in message and "\n" not in message


def rerank_reply(provider: str) -> Callable[[Received], Reply]:
    def reply(request: Received) -> Reply:
        body = request.json()
        # Relevance: how many query words a document holds; the real APIs' shape.
        words = set(body["query"].lower().split())
        scored = sorted(
            (
                (i, len(words & set(d.lower().split())) / 10)
                for i, d in enumerate(body["documents"])
            ),
            key=lambda item: -item[1],
        )[: body["top_n"]]
        results = [{"index": i, "relevance_score": s} for i, s in scored]
        if provider == "jina":
            return Reply.json(
                {"model": body["model"], "usage": {"total_tokens": 42}, "results": results}
            )
        return Reply.json(
            {
                "id": "r-1",
                "results": results,
                "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
            }
        )

    return reply


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["jina", "cohere"])
def test_hosted_rerankers(
    provider: str,
    docs: Path,
    make_engine: Callable[..., RagEngine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(f"{provider.upper()}_API_KEY", "test-key-abcdefghijklmnop")
    with WireServer() as server:
        server.handler = rerank_reply(provider)
        engine = make_engine(
            retriever="bm25",
            top_k=1,
            rerank={"provider": provider, "base_url": server.url, "fetch_multiplier": 4},
        )

        async def go() -> Any:
            await engine.ingest()
            return await engine.search("support hours engineer widget")

        outcome = anyio.run(go)
        sent = server.requests[-1]
        body = sent.json()
    assert (
        sent.path == "/rerank"
        and sent.headers["authorization"] == "Bearer test-key-abcdefghijklmnop"
    )
    assert body["query"] == "support hours engineer widget" and body["top_n"] == 1
    assert len(body["documents"]) > 1 and ("return_documents" in body) == (provider == "jina")
    assert body["model"] == (
        "jina-reranker-v2-base-multilingual" if provider == "jina" else "rerank-v3.5"
    )
    assert [r.source for r in outcome.results] == ["guide/support.txt"]
    assert outcome.results[0].score == pytest.approx(0.2)


@pytest.mark.slow
def test_a_failing_reranker_keeps_the_retrievers_order(
    docs: Path, make_engine: Callable[..., RagEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COHERE_API_KEY", "test-key-abcdefghijklmnop")
    with WireServer() as server:
        server.default = Reply.json({"message": "overloaded"}, status=503)
        engine = make_engine(
            retriever="bm25",
            rerank={"provider": "cohere", "base_url": server.url, "max_retries": 0},
        )

        async def go() -> Any:
            await engine.ingest()
            return await engine.search("refund")

        outcome = anyio.run(go)
    assert outcome.results[0].source == "guide/refunds.txt"
    assert "reranker cohere failed" in outcome.notes[0] and "503" in outcome.notes[0]


def test_rewrite_hyde_and_llm_rerank_are_journaled_side_calls(
    tmp_path: Path, host: PluginHost
) -> None:
    write_docs(tmp_path)
    config = {
        "llm": {
            "provider": "scripted",
            "rules": [
                {"match": "Rank the numbered|Passages:", "reply": "2, 1"},
                {"match": "^refund money back\\?$", "reply": "refund policy"},
                {
                    "match": "^refund policy$",
                    "reply": "Customers may return a widget within 30 days.",
                },
            ],
        },
        "store": {"url": "memory://"},
        "rag": {
            "documents": ["guide"],
            "embedder": "hashing",
            "retriever": "bm25",
            "top_k": 2,
            "query_rewrite": True,
            "hyde": True,
            "rerank": True,
            "augmentation": "none",
        },
    }

    async def go() -> tuple[Any, list[Any]]:
        async with KoboiAgent.from_dict(config, base_dir=tmp_path, host=host) as agent:
            called = await agent.call_tool("rag__search", {"query": "refund money back?"})
            return called, list(await agent.store.read(called.session_id))

    called, events = anyio.run(go)
    assert called.ok, called.content
    data = json.loads(called.content)
    assert data["rewritten"] == "refund policy" and data["hyde"] is True
    purposes = [e.data["purpose"] for e in events if e.type == "side_call_finished"]
    assert purposes == ["rag.rewrite", "rag.hyde", "rag.rerank"]
    assert len(data["results"]) == 2
