"""The index in a PostgreSQL store's database: full-text search in PostgreSQL, vectors
beside it, incremental ingestion, and an agent whose store is PostgreSQL."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest

import koboi_store_sql.plugin
from koboi import KoboiAgent, PluginHost
from koboi_rag.config import RagSettings
from koboi_rag.engine import RagEngine
from koboi_rag.location import close_indexes, index_for_url

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SERVER = os.environ.get(
    "KOBOI_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture
def pg_url() -> Iterator[str]:
    import psycopg

    schema = f"koboi_rag_{uuid.uuid4().hex[:10]}"
    plain = SERVER.replace("postgresql+psycopg://", "postgresql://", 1)
    try:
        connection = psycopg.connect(plain, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {SERVER} ({exc}); start it or deselect -m 'not postgres'"
        )
    with connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield f"{SERVER}?options={quote(f'-csearch_path={schema}')}"
        finally:
            close_indexes()
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_index_on_postgresql(docs: Path, host: PluginHost, pg_url: str) -> None:
    def engine(**options: object) -> RagEngine:
        settings = RagSettings(documents=["guide", "notes"], embedder="hashing", **options)  # type: ignore[arg-type]
        return RagEngine(settings, index_for_url(pg_url, docs), host=host, base_dir=docs)

    async def go() -> None:
        hybrid = engine(retriever="hybrid", top_k=1)
        report = await hybrid.ingest()
        assert report.added == 4 and report.embedded == report.chunks
        for retriever in ("keyword", "bm25", "semantic", "hybrid"):
            outcome = await hybrid.search("refund within 30 days", retriever=retriever)
            assert outcome.results[0].source == "guide/refunds.txt", retriever
        (docs / "notes/weather.txt").unlink()
        again = await hybrid.ingest()
        assert (again.unchanged, again.deleted, again.embedded) == (3, 1, 0)
        stats = await hybrid.stats()
        assert stats["documents"] == 3 and stats["lexical"].startswith("PostgreSQL")
        filtered = await hybrid.search(
            "widget", retriever="keyword", filter={"source": "guide/install.md"}
        )
        assert [r.source for r in filtered.results] == ["guide/install.md"]

    anyio.run(go)


def test_an_agent_on_a_postgresql_store_keeps_its_index_there(
    docs: Path, host: PluginHost, pg_url: str
) -> None:
    host.add_plugin(koboi_store_sql.plugin, "store-sql", dist="koboi-store-sql")
    config = {
        "llm": {
            "provider": "scripted",
            "rules": [{"match": "refund", "tool": "rag__search", "arguments": {"query": "refund"}}],
        },
        "store": {"url": pg_url},
        "rag": {"documents": ["guide"], "embedder": "hashing", "augmentation": "none"},
    }

    async def go() -> str:
        async with KoboiAgent.from_dict(config, base_dir=docs, host=host) as agent:
            result = await agent.run("refund?")
            return result.output

    assert "guide/refunds.txt" in anyio.run(go)
