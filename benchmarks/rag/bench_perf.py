"""koboi-rag's speed and size on Cranfield: ingestion, index size, query latency per
retriever, memory, and BM25 beside rank_bm25 and bm25s measured in the same run.

    uv run python benchmarks/rag/bench_perf.py [--cranfield DIR] [--queries N]

Ingestion goes through the real pipeline (1,400 files on disk -> parser -> chunker
-> SQLite index with FTS5 -> LSA fitted and every chunk embedded). Latencies are
``engine.search`` end to end (analysis, ranking, reading the chunks back from the
database), warm (after one query per retriever), p50 and p99 over Cranfield's 225
queries. The BM25 comparison ranks the same analysed tokens with three libraries:
koboi-rag's bm25 ranking (bm25s underneath, with its filter mask and tie order),
bm25s alone, and rank_bm25's BM25Okapi (which scores every document in Python).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from koboi.plugins import default_host
from koboi_rag.analysis import Analyzer
from koboi_rag.config import RagSettings
from koboi_rag.engine import MEMORY, RagEngine
from koboi_rag.evaluation import load_collection
from koboi_rag.index import SQLiteIndex
from koboi_rag.retrieval import bm25_ranking

ROOT = Path(__file__).resolve().parents[2]
CRANFIELD = Path(
    os.environ.get("KOBOI_CRANFIELD", ROOT.parent / "shared" / "data" / "ir" / "cranfield")
)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    """min, p50, p99: on a shared machine the min says most about the code itself."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return ordered[0], statistics.median(ordered), p99


async def main(args: argparse.Namespace) -> None:
    collection = load_collection(args.cranfield, "cranfield")
    queries = [q.fields.get("W", "") for q in collection.queries][: args.queries]
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} cores; Cranfield: "
        f"{len(collection.documents)} documents, {len(queries)} queries"
    )
    base_rss = rss_mb()
    with tempfile.TemporaryDirectory(prefix="koboi-rag-perf-") as temp:
        work = Path(temp)
        (work / "docs").mkdir()
        for record in collection.documents:
            (work / "docs" / f"d{record.id}.txt").write_text(record.text() or " ")
        db = work / "index.db"
        settings = RagSettings(
            documents=["docs"], chunk_size=100_000, chunk_overlap=0, retriever="hybrid", top_k=10
        )
        engine = RagEngine(settings, SQLiteIndex(db), host=default_host(), base_dir=work)
        began = time.perf_counter()
        report = await engine.ingest()
        ingest_seconds = time.perf_counter() - began
        stats = await engine.stats()
        import sqlite3

        with sqlite3.connect(db) as connection:  # fold the WAL into the file before measuring
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = sum(p.stat().st_size for p in work.glob("index.db*"))  # noqa: ASYNC240 - a benchmark
        print("\n## Ingestion (BM25 + the default LSA embedder, 200 dimensions)")
        print(
            f"  {report.added} documents, {report.chunks} chunks, {report.embedded} embedded in "
            f"{ingest_seconds:.2f} s ({report.added / ingest_seconds:.0f} documents/s)"
        )
        print(
            f"  index size on disk: {size / 1e6:.2f} MB (text+terms {stats['text_bytes'] / 1e6:.2f} MB, "
            f"vectors {stats['vector_bytes'] / 1e6:.2f} MB, FTS5 and the LSA state the rest)"
        )
        print(
            f"  max RSS after ingestion: {rss_mb():.0f} MB (interpreter and imports: {base_rss:.0f} MB)"
        )

        print("\n## Query latency, engine.search end to end (top 10, warm)")
        print(f"  {'retriever':<10} {'min ms':>8} {'p50 ms':>8} {'p99 ms':>8}")
        for retriever in ("keyword", "bm25", "semantic", "hybrid"):
            await engine.search(queries[0], retriever=retriever)
            samples = []
            for query in queries:
                start = time.perf_counter()
                await engine.search(query, retriever=retriever)
                samples.append((time.perf_counter() - start) * 1000)
            low, p50, p99 = percentiles(samples)
            print(f"  {retriever:<10} {low:>8.2f} {p50:>8.2f} {p99:>8.2f}")
        print(f"  max RSS after queries: {rss_mb():.0f} MB")

        print("\n## BM25 ranking alone, same analysed tokens (top 10 of 1,400)")
        analyzer = Analyzer("en")
        index = engine.index
        _, terms = index.terms(settings.collection)
        corpus = [t.split() for t in terms]
        tokenized = [analyzer.terms(q) for q in queries]
        import bm25s
        import numpy as np
        from rank_bm25 import BM25Okapi

        rows = []
        samples = []
        for tokens in tokenized:
            start = time.perf_counter()
            bm25_ranking(MEMORY, index, settings.collection, tokens, 10, None)
            samples.append((time.perf_counter() - start) * 1000)
        rows.append(
            ("koboi-rag bm25", *percentiles(samples), "bm25s inside, plus the collection check")
        )
        retriever = bm25s.BM25(method="lucene")
        retriever.index(corpus, show_progress=False)
        samples = []
        for tokens in tokenized:
            start = time.perf_counter()
            known = [t for t in tokens if t in retriever.vocab_dict]
            if known:
                scores = retriever.get_scores(known)
                np.argpartition(-scores, 10)[:10]
            samples.append((time.perf_counter() - start) * 1000)
        rows.append(("bm25s", *percentiles(samples), "get_scores + argpartition"))
        okapi = BM25Okapi(corpus)
        samples = []
        for tokens in tokenized:
            start = time.perf_counter()
            scores = okapi.get_scores(tokens)
            np.argpartition(-scores, 10)[:10]
            samples.append((time.perf_counter() - start) * 1000)
        rows.append(
            ("rank_bm25 BM25Okapi", *percentiles(samples), "scores every document in Python")
        )
        print(f"  {'library':<22} {'min ms':>8} {'p50 ms':>8} {'p99 ms':>8}")
        for name, low, p50, p99, note in rows:
            print(f"  {name:<22} {low:>8.3f} {p50:>8.3f} {p99:>8.3f}  {note}")
        del engine
        gc.collect()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cranfield", type=Path, default=CRANFIELD)
    parser.add_argument("--queries", type=int, default=225)
    anyio.run(main, parser.parse_args())
