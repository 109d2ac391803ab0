"""Chunkers, filters, analysers and the evaluation measures, on small inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koboi_rag.analysis import Analyzer
from koboi_rag.chunking import chunk_document, document_text
from koboi_rag.evaluation import evaluate, load_collection, ndcg_at, recall_at
from koboi_rag.filters import FilterError, compile_filter
from koboi_rag.hookspecs import ParsedDocument, ParsedSection

TEXT = (
    "Widgets are small. They fit in a box! Do they break? Rarely.\n\n"
    "Gadgets are large. They need a truck.\n\n"
    "# Shipping\n\nWe ship on Mondays. Boxes travel by road."
)


def doc(*texts: str) -> ParsedDocument:
    return ParsedDocument(sections=[ParsedSection(text=t, page=n) for n, t in enumerate(texts, 1)])


@pytest.mark.parametrize("chunker", ["fixed", "sentence", "paragraph", "semantic"])
@pytest.mark.parametrize("unit", ["chars", "tokens"])
def test_every_chunk_is_its_span_of_the_document(chunker: str, unit: str) -> None:
    parsed = doc(TEXT, "Second page. With two sentences.")
    full = document_text(parsed)
    size = 40 if unit == "chars" else 8
    chunks = chunk_document(parsed, chunker=chunker, size=size, overlap=4, unit=unit)
    assert chunks and [c.position for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert full[chunk.start : chunk.end] == chunk.text
    assert {c.page for c in chunks} == {1, 2}


def test_sentence_and_paragraph_chunkers_keep_units_whole_and_headings() -> None:
    sentences = chunk_document(doc(TEXT), chunker="sentence", size=40, overlap=0)
    assert sentences[0].text == "Widgets are small. They fit in a box!"
    paragraphs = chunk_document(doc(TEXT), chunker="paragraph", size=200, overlap=0)
    assert paragraphs[-1].heading == "Shipping" and paragraphs[-1].text.startswith("# Shipping")


def test_fixed_chunks_overlap() -> None:
    text = " ".join(f"w{i}" for i in range(30))
    chunks = chunk_document(doc(text), chunker="fixed", size=10, overlap=3, unit="tokens")
    first, second = chunks[0].text.split(), chunks[1].text.split()
    assert len(first) == 10 and first[-3:] == second[:3]


@settings(max_examples=25, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400), st.integers(8, 80))
def test_chunk_spans_hold_for_any_text(text: str, size: int) -> None:
    parsed = doc(text)
    full = document_text(parsed)
    for chunker in ("fixed", "sentence", "paragraph"):
        for chunk in chunk_document(parsed, chunker=chunker, size=size, overlap=size // 4):
            assert full[chunk.start : chunk.end] == chunk.text and chunk.text.strip()


def test_filters() -> None:
    meta = {"lang": "en", "year": 2021, "tags": ["a", "b"], "source": {"kind": "web"}}
    assert compile_filter({"lang": "en", "year": {"$gte": 2020, "$lt": 2022}})(meta)
    assert compile_filter({"tags": "b"})(meta) and compile_filter({"tags": {"$in": ["x", "a"]}})(
        meta
    )
    assert compile_filter({"$or": [{"lang": "id"}, {"source.kind": "web"}]})(meta)
    assert not compile_filter({"year": {"$gt": "2020"}})(meta)  # a number is not compared with text
    assert not compile_filter({"missing": {"$exists": True}})(meta)
    assert compile_filter({"lang": {"$nin": ["id"]}, "year": {"$ne": 2020}})(meta)
    with pytest.raises(FilterError, match=r"filter\.year\.\$near: unknown operator"):
        compile_filter({"year": {"$near": 1}})
    with pytest.raises(FilterError, match=r"filter\.\$and: give a non-empty list"):
        compile_filter({"$and": []})


def test_indonesian_analyser_stems_and_drops_stop_words() -> None:
    analyser = Analyzer("id")
    assert analyser.terms("Perekonomian dan pembangunan yang berkelanjutan") == [
        "ekonomi",
        "bangun",
        "lanjut",
    ]
    assert Analyzer("en").terms("The running boxes") == ["run", "box"]
    expanded = Analyzer("en", synonyms={"car": ["automobile"]}).query_terms("cars")
    assert expanded == ["car", "automobil"]


def test_ndcg_recall_and_the_smart_format(tmp_path: Path) -> None:
    gains = {"a": 3.0, "b": 1.0}
    assert ndcg_at(["a", "b"], gains) == pytest.approx(1.0)
    assert ndcg_at(["x", "a"], gains) == pytest.approx((3 / 1.5849625) / (3 + 1 / 1.5849625))
    assert recall_at(["x", "b"], gains, k=1) == 0.0 and recall_at(["x", "b"], gains) == 0.5
    (tmp_path / "T.ALL").write_text(
        ".I 1\n.T\nA title\n.W\nA title\nbody one\n.I 2\n.W\nbody two\n"
    )
    (tmp_path / "T.QRY").write_text(".I 7\n.W\nwhat about one\n.I 9\n.W\ntwo\n")
    (tmp_path / "T.REL").write_text("1 1 0 0\n2 2 0 0\n")
    collection = load_collection(tmp_path)
    assert [d.text() for d in collection.documents] == ["A title\nbody one", "body two"]
    assert collection.judgements == {1: {"1": 1.0}, 2: {"2": 1.0}}  # queries by file order
    scores = evaluate({1: ["1"], 2: ["1", "2"]}, collection.judgements)
    assert scores["recall@100"] == 1.0 and scores["ndcg@10"] == pytest.approx(
        (1 + 1 / 1.5849625) / 2
    )
