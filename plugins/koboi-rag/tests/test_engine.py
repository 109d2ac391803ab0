"""Ingestion and search over a small document set, through the real index (SQLite)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from koboi.errors import KoboiError
from koboi_rag.engine import RagEngine


def run(coro_fn: Callable[..., object], *args: object) -> object:
    return anyio.run(coro_fn, *args)  # type: ignore[arg-type]


@pytest.mark.parametrize("retriever", ["keyword", "bm25", "semantic", "hybrid"])
def test_every_retriever_finds_the_refund_policy_with_its_citation(
    docs: Path, make_engine: Callable[..., RagEngine], retriever: str
) -> None:
    engine = make_engine(retriever=retriever, top_k=2)

    async def go() -> None:
        report = await engine.ingest()
        assert report.added == 4 and not report.failed
        outcome = await engine.search("how do I get a refund for a widget?")
        top = outcome.results[0]
        assert top.source == "guide/refunds.txt"
        citation = top.citation()
        assert citation["position"] == 0 and citation["n"] == 1
        assert citation["chars"] == [top.start, top.end]
        text = (docs / "guide/refunds.txt").read_text()
        assert text[top.start : top.end] == top.text  # the span points into the document
        assert citation["score"] > 0

    anyio.run(go)


def test_incremental_ingestion_skips_unchanged_reindexes_changed_and_removes_deleted(
    docs: Path, make_engine: Callable[..., RagEngine]
) -> None:
    engine = make_engine(retriever="hybrid")

    async def go() -> None:
        first = await engine.ingest()
        assert (first.added, first.embedded) == (4, first.chunks)
        again = await engine.ingest()
        assert (again.added, again.updated, again.unchanged, again.embedded) == (0, 0, 4, 0)
        (docs / "guide/support.txt").write_text("Support is open on weekends now.")
        (docs / "notes/weather.txt").unlink()
        touched = docs / "guide/refunds.txt"
        os.utime(touched, ns=(1_000_000_000, 1_000_000_000))  # same bytes, new version
        third = await engine.ingest()
        assert (third.updated, third.deleted, third.unchanged) == (1, 1, 2)
        assert third.embedded == third.chunks == 1  # only the changed document's chunk
        hits = await engine.search("weather station wind", retriever="bm25")
        assert all(r.source != "notes/weather.txt" for r in hits.results)
        stats = await engine.stats()
        assert stats["documents"] == 3 and stats["embedded"] == stats["chunks"]

    anyio.run(go)


def test_metadata_filter_narrows_before_ranking(
    docs: Path, make_engine: Callable[..., RagEngine]
) -> None:
    engine = make_engine(retriever="bm25", top_k=5)

    async def go() -> None:
        await engine.ingest()
        only_notes = await engine.search(
            "widget refund weather", filter={"path": {"$in": ["notes/weather.txt"]}}
        )
        assert [r.source for r in only_notes.results] == ["notes/weather.txt"]
        keyword = await engine.search(
            "widget refund weather", retriever="keyword", filter={"source": "guide/refunds.txt"}
        )
        assert [r.source for r in keyword.results] == ["guide/refunds.txt"]
        none = await engine.search("widget", filter={"path": {"$exists": False}})
        assert none.results == []

    anyio.run(go)


def test_bad_documents_are_reported_one_by_one_and_nothing_indexed_is_lost(
    tmp_path: Path, docs: Path, make_engine: Callable[..., RagEngine]
) -> None:
    engine = make_engine(
        documents=["guide", "notes", "odd"], retriever="hybrid", max_document_size_mb=1
    )

    async def go() -> None:
        assert not (await engine.ingest()).failed
        odd = tmp_path / "odd"
        odd.mkdir()
        (odd / "blob.txt").write_bytes(b"\x7fELF\x00\x01\x02" * 100)  # binary under a text name
        huge = odd / "huge.txt"
        with huge.open("wb") as handle:  # 200 MB, sparse: nothing is written but its size
            handle.truncate(200 * 1024 * 1024)
        (odd / "scan.pdf").write_bytes(b"%PDF-1.7 not really")
        # A document that was fine becomes unreadable: its indexed version stays.
        (docs / "guide/refunds.txt").write_bytes(b"\xff\xfe\x00broken")
        report = await engine.ingest()
        errors = {item["document"]: item["error"] for item in report.failed}
        assert "binary content" in errors["odd/blob.txt"]
        assert "209.7 MB is over rag.max_document_size_mb (1 MB)" in errors["odd/huge.txt"]
        assert (
            "no parser" in errors["odd/scan.pdf"] and "koboi-rag-parsers" in errors["odd/scan.pdf"]
        )
        assert "guide/refunds.txt" in errors
        assert all("\n" not in e for e in errors.values())  # one line each
        hits = await engine.search("refund within 30 days")
        assert hits.results[0].source == "guide/refunds.txt"  # still indexed as it was
        assert (await engine.stats())["documents"] == 4

    anyio.run(go)


def test_an_empty_collection_says_so(tmp_path: Path, make_engine: Callable[..., RagEngine]) -> None:
    (tmp_path / "empty").mkdir()
    engine = make_engine(documents=["empty", "missing/*.md"])

    async def go() -> None:
        report = await engine.ingest()
        assert report.added == 0 and not report.failed
        assert "empty: matches no document" in report.notes
        assert any("the collection is empty" in n for n in report.notes)
        outcome = await engine.search("anything")
        assert outcome.results == []

    anyio.run(go)


def test_forget_and_a_changed_analyser(docs: Path, make_engine: Callable[..., RagEngine]) -> None:
    async def go() -> None:
        engine = make_engine(retriever="bm25")
        await engine.ingest()
        assert await engine.forget(["notes"]) == 1
        assert (await engine.stats())["documents"] == 3
        indonesian = make_engine(retriever="bm25", language="id")
        report = await indonesian.ingest()
        assert any("the analyser changed" in n for n in report.notes)
        assert report.added == 4
        assert await indonesian.forget() == 4

    anyio.run(go)


def test_semantic_search_without_vectors_is_a_clear_error(
    docs: Path, make_engine: Callable[..., RagEngine]
) -> None:
    engine = make_engine(retriever="bm25")

    async def go() -> None:
        await engine.ingest()
        with pytest.raises(KoboiError, match="no vectors"):
            await engine.search("refund", retriever="semantic")
        with pytest.raises(KoboiError, match="query_rewrite"):
            await make_engine(retriever="bm25", query_rewrite=True).search("refund")

    anyio.run(go)


def test_the_indonesian_analyser_is_chosen_by_config(
    tmp_path: Path, make_engine: Callable[..., RagEngine]
) -> None:
    from .conftest import write_docs

    write_docs(
        tmp_path,
        {
            "id/ekonomi.txt": "Pembangunan perekonomian desa yang berkelanjutan.",
            "id/cuaca.txt": "Hujan turun di kota pada sore hari.",
        },
    )

    async def top(language: str) -> list[str]:
        engine = make_engine(
            documents=["id"], retriever="bm25", language=language, collection=language
        )
        await engine.ingest()
        return [r.source for r in (await engine.search("membangun ekonomi")).results]

    assert anyio.run(top, "id") == ["id/ekonomi.txt"]  # bangun, ekonomi: the same stems
    assert anyio.run(top, "en") == []  # English stemming leaves the Indonesian words apart


def test_two_in_memory_indexes_never_share_what_is_cached(tmp_path: Path, host: object) -> None:
    from koboi_rag.config import RagSettings
    from koboi_rag.index import SQLiteIndex

    from .conftest import write_docs

    write_docs(tmp_path, {"a/x.txt": "apples and pears", "b/y.txt": "trains and boats"})

    async def search(folder: str, query: str) -> list[str]:
        settings = RagSettings(documents=[folder], retriever="bm25")
        engine = RagEngine(settings, SQLiteIndex(None), host=host, base_dir=tmp_path)  # type: ignore[arg-type]
        await engine.ingest()
        return [r.source for r in (await engine.search(query)).results]

    assert anyio.run(search, "a", "apples") == ["a/x.txt"]
    assert anyio.run(search, "b", "trains") == ["b/y.txt"]  # not the first index's cached BM25
