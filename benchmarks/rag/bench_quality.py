"""Retrieval quality of koboi-rag's retrievers on judged test collections.

Prints nDCG@10 and recall@100 of every retriever (keyword, bm25, semantic and
hybrid with the offline LSA embedder; with MiniLM too when koboi-embed-minilm is
installed) on Cranfield and on every other collection given. Nothing here is tuned
to a collection: the settings are koboi-rag's defaults (English analyser, LSA with
200 dimensions, RRF with k = 60 and equal weights), and each collection is indexed
through the real pipeline (files on disk -> parser -> chunker -> index).

    uv run python benchmarks/rag/bench_quality.py                       # Cranfield
    uv run python benchmarks/rag/bench_quality.py --collection cisi=/path/to/cisi
    .nox/minilm/bin/python benchmarks/rag/bench_quality.py --minilm      # + MiniLM rows

Cranfield is read from ../shared/data/ir/cranfield/ (relative to the repository
root) unless --cranfield points elsewhere. One chunk per document (chunk_size larger
than any abstract), so documents are ranked as the judgements judge them.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import anyio

from koboi.plugins import default_host
from koboi_rag.config import RagSettings
from koboi_rag.engine import RagEngine
from koboi_rag.evaluation import Collection, evaluate, load_collection
from koboi_rag.index import SQLiteIndex

ROOT = Path(__file__).resolve().parents[2]
CRANFIELD = Path(
    os.environ.get("KOBOI_CRANFIELD", ROOT.parent / "shared" / "data" / "ir" / "cranfield")
)
DEPTH = 100

#: Measured on this kind of machine by others, for comparison (nDCG@10, Cranfield).
REFERENCE = "reference (WAVE2): bm25s 0.354, FTS5 0.348, LSA k=200 0.373, MiniLM 0.358, BM25+MiniLM RRF 0.392"


def write_documents(collection: Collection, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for record in collection.documents:
        (directory / f"d{record.id}.txt").write_text(record.text() or " ", encoding="utf-8")


def doc_id(source: str) -> str:
    return Path(source).stem[1:]


async def run_collection(collection: Collection, embedders: list[str], workdir: Path) -> None:
    write_documents(collection, workdir / "docs")
    print(
        f"\n== {collection.name}: {len(collection.documents)} documents, "
        f"{len(collection.queries)} queries, {len(collection.judgements)} judged"
    )
    rows = []
    for embedder in embedders:
        settings = RagSettings(
            documents=["docs"],
            chunk_size=100_000,
            chunk_overlap=0,
            retriever="hybrid",
            embedder=embedder,
            top_k=DEPTH,
        )
        index = SQLiteIndex(workdir / f"index-{embedder}.db")
        engine = RagEngine(settings, index, host=default_host(), base_dir=workdir)
        began = time.perf_counter()
        report = await engine.ingest()
        print(
            f"   indexed with {embedder}: {report.chunks} chunks in {time.perf_counter() - began:.1f} s"
        )
        retrievers = (
            ["keyword", "bm25", "semantic", "hybrid"]
            if embedder == embedders[0]
            else ["semantic", "hybrid"]
        )
        for retriever in retrievers:
            runs: dict[int, list[str]] = {}
            for number, query in enumerate(collection.queries, start=1):
                text = query.fields.get("W", "") or query.text()
                outcome = await engine.search(text, top_k=DEPTH, retriever=retriever)
                ranked: list[str] = []
                for result in outcome.results:
                    d = doc_id(result.source)
                    if d not in ranked:
                        ranked.append(d)
                runs[number] = ranked
            scores = evaluate(runs, collection.judgements)
            label = retriever if retriever in ("keyword", "bm25") else f"{retriever} ({embedder})"
            rows.append((label, scores["ndcg@10"], scores["recall@100"], scores["queries"]))
    print(f"   {'retriever':<28} {'nDCG@10':>8} {'recall@100':>11} {'queries':>8}")
    for label, ndcg, recall, queries in rows:
        print(f"   {label:<28} {ndcg:>8.4f} {recall:>11.4f} {queries:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cranfield", type=Path, default=CRANFIELD, help="Cranfield's directory")
    parser.add_argument(
        "--collection",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="another SMART-format collection (*.ALL, *.QRY, *.REL); repeatable",
    )
    parser.add_argument("--minilm", action="store_true", help="also the MiniLM embedder")
    args = parser.parse_args()
    collections = []
    if args.cranfield.is_dir():
        collections.append(load_collection(args.cranfield, "cranfield"))
    else:
        print(f"note: no Cranfield at {args.cranfield} (give --cranfield DIR)")
    for item in args.collection:
        name, _, directory = item.partition("=")
        collections.append(load_collection(Path(directory), name))
    embedders = ["lsa"] + (["minilm"] if args.minilm else [])
    print(REFERENCE)
    with tempfile.TemporaryDirectory(prefix="koboi-rag-quality-") as temp:
        for collection in collections:
            anyio.run(run_collection, collection, embedders, Path(temp) / collection.name)


if __name__ == "__main__":
    main()
