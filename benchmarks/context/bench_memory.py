"""Memory recall latency with 10,000 stored facts, beside SQLite FTS5 on the same facts.

    uv run python benchmarks/context/bench_memory.py            # ~30 s
    uv run python benchmarks/context/bench_memory.py --facts 2000

One principal's memory holds N synthetic facts in a SQLite store (koboi-store-sql,
the store koboi run uses). What is timed is what proactive recall does before a
model call: ``MemoryStore.search`` (the version check, one keyed-record read, then
BM25 over the process's index; with ``--vectors``, a hashing embedder's cosine
fused by rank). Printed: p50 / p95 over 300 queries, the first search (which builds
the index from the store), and the peer: an FTS5 ``MATCH ... ORDER BY bm25`` query
on a table of the same facts, in the same process.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import anyio

SUBJECTS = [
    "dentist",
    "locker",
    "printer",
    "vault",
    "cluster",
    "garden",
    "bicycle",
    "passport",
    "laptop",
    "train",
    "office",
]
WORDS = [
    "blue",
    "north",
    "quiet",
    "early",
    "seven",
    "copper",
    "river",
    "harbor",
    "winter",
    "orchard",
    "signal",
    "ledger",
    "amber",
    "granite",
    "falcon",
    "meadow",
    "lantern",
    "thistle",
    "cobalt",
    "summit",
    "velvet",
    "canyon",
    "marble",
    "sparrow",
]


def fact(rng: random.Random, n: int) -> str:
    subject = rng.choice(SUBJECTS)
    detail = " ".join(rng.choices(WORDS, k=rng.randint(4, 10)))
    return f"The user's {subject} note {n}: {detail}."


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--facts", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    from koboi_memory.store import MemoryStore, Scope
    from koboi_store_sql.plugin import create_store

    rng = random.Random(7)
    texts = [fact(rng, n) for n in range(args.facts)]
    queries = [
        f"{rng.choice(SUBJECTS)} {' '.join(rng.choices(WORDS, k=2))}" for _ in range(args.queries)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        store = create_store(f"sqlite:///{Path(tmp) / 'memory.db'}", Path(tmp))
        async with store:
            memory = MemoryStore(store, max_facts=args.facts + 1, max_fact_chars=500)
            scope = Scope("bench", "alice")
            started = time.perf_counter()
            # Written as the tools write them (the version record after each fact).
            for n, text in enumerate(texts):
                await store.record_put(
                    "memory.fact",
                    scope.key + f"f{n:06d}",
                    {
                        "id": f"f{n:06d}",
                        "text": text,
                        "source": "tool",
                        "core": False,
                        "session": None,
                        "created_at": float(n),
                    },
                )
            await memory.add(scope, "The user's locker code is 4711.")
            stored = time.perf_counter() - started
            started = time.perf_counter()
            await memory.search(scope, queries[0])
            first = time.perf_counter() - started
            times = []
            for query in queries:
                started = time.perf_counter()
                hits = await memory.search(scope, query, k=5)
                times.append(time.perf_counter() - started)
            assert hits
            found = await memory.search(scope, "locker code", k=5)
            assert found[0].fact.text == "The user's locker code is 4711."

        fts = sqlite3.connect(":memory:")
        fts.execute("CREATE VIRTUAL TABLE facts USING fts5(text)")
        fts.executemany("INSERT INTO facts(text) VALUES (?)", [(t,) for t in texts])
        peer = []
        for query in queries:
            match = " OR ".join(query.split())
            started = time.perf_counter()
            fts.execute(
                "SELECT rowid FROM facts WHERE facts MATCH ? ORDER BY bm25(facts) LIMIT 5", (match,)
            ).fetchall()
            peer.append(time.perf_counter() - started)

    def ms(values: list[float], q: int) -> str:
        return f"{statistics.quantiles(values, n=100)[q - 1] * 1e3:.2f} ms"

    print(f"{args.facts:,} facts of one principal, SQLite store; {args.queries} queries, top 5")
    print(
        f"  stored in {stored:.1f} s; first search (index built from the store) {first * 1e3:.0f} ms"
    )
    print(f"  memory recall      p50 {ms(times, 50)}   p95 {ms(times, 95)}")
    print(f"  peer: SQLite FTS5  p50 {ms(peer, 50)}   p95 {ms(peer, 95)}  (same facts, bm25 order)")


if __name__ == "__main__":
    anyio.run(main)
