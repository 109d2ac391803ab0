"""The MiniLM embedder, loaded from its wheel with the hub switched off; retrieval
with it through koboi-rag. Runs in the pip-made venv of `uv run nox -s minilm`."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

import koboi_embed_minilm.plugin
import koboi_rag.plugin
from koboi import PluginHost
from koboi_rag.config import RagSettings
from koboi_rag.embedders import embedder_from
from koboi_rag.engine import RagEngine
from koboi_rag.index import SQLiteIndex


def host() -> PluginHost:
    made = PluginHost(load_entry_points=False, strict=True)
    made.add_plugin(koboi_rag.plugin, "rag", dist="koboi-rag")
    made.add_plugin(koboi_embed_minilm.plugin, "embed-minilm", dist="koboi-embed-minilm")
    return made


def test_sentences_that_mean_the_same_are_close() -> None:
    embedder = embedder_from("minilm", host())

    async def go() -> list[list[float]]:
        await embedder.fit([])
        return await embedder.embed_documents(
            [
                "How do I get my money back?",
                "Refunds are paid within 30 days.",
                "The roof weather station.",
            ]
        )

    question, refund, weather = anyio.run(go)
    assert len(question) == embedder.dimensions == 384
    dot = lambda a, b: sum(x * y for x, y in zip(a, b, strict=True))  # noqa: E731
    assert dot(question, refund) > dot(question, weather) + 0.1
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # nothing could have been downloaded


def test_semantic_retrieval_finds_a_paraphrase(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "refunds.txt").write_text(
        "Customers may return a purchase within thirty days for their money."
    )
    (tmp_path / "docs" / "depot.txt").write_text("The north depot opens at six in the morning.")
    settings = RagSettings(documents=["docs"], embedder="minilm", retriever="semantic", top_k=1)
    engine = RagEngine(settings, SQLiteIndex(tmp_path / "i.db"), host=host(), base_dir=tmp_path)

    async def go() -> str:
        await engine.ingest()
        return (await engine.search("can I get reimbursed?")).results[0].source

    assert anyio.run(go) == "docs/refunds.txt"
