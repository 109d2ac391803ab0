"""Cost of one committed journal append, per store, against the machine's raw fsync.

Appends one ~200-byte event at a time to one session (what the agent loop does
before and after every model and tool call) and times each ``append`` call
end to end: the thread hop, the transaction, and the commit's flush to disk.
Prints the median and 95th percentile in microseconds for:

- memory:// (InMemoryStore: no I/O, the floor),
- SQLite, durability=power_loss (synchronous=FULL: fsync on every commit),
- SQLite, durability=process (synchronous=NORMAL: no fsync per commit in WAL),
- PostgreSQL (synchronous_commit=on), when a server is reachable,
- a bare thread hop (anyio.to_thread.run_sync of a no-op: the async overhead),
- raw fsync: write 200 bytes to a file and os.fsync it (the disk's floor).

    uv run python benchmarks/bench_store.py             # 500 appends per store
    uv run python benchmarks/bench_store.py --quick     # 100 appends, smoke run
    KOBOI_BENCH_POSTGRES_URL=postgresql+psycopg://user@host/db uv run python benchmarks/bench_store.py

PostgreSQL runs in a schema of its own (koboi_bench_<random>), dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

import anyio
import anyio.to_thread

from koboi.store import InMemoryStore, NewEvent, Store

POSTGRES_URL = os.environ.get(
    "KOBOI_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
EVENT = NewEvent(
    "tool_call_finished",
    {"call_id": "call_0123456789", "name": "read_file", "result": "x" * 120, "error": None},
)


def _summary(samples_ns: list[int]) -> tuple[float, float]:
    ordered = sorted(samples_ns)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return statistics.median(ordered) / 1000, p95 / 1000


async def _time(step: Callable[[], Awaitable[object]], n: int) -> list[int]:
    for _ in range(min(20, n)):  # warm up: connections, caches, page allocation
        await step()
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        await step()
        samples.append(time.perf_counter_ns() - start)
    return samples


async def bench_store(store: Store, n: int) -> list[int]:
    async with store:
        session = (await store.create_session(f"bench-{uuid.uuid4().hex}")).id
        return await _time(lambda: store.append(session, [EVENT]), n)


async def bench_thread_hop(n: int) -> list[int]:
    return await _time(lambda: anyio.to_thread.run_sync(lambda: None), n)


def bench_fsync(directory: Path, n: int) -> list[int]:
    path = directory / "fsync.bin"
    payload = b"x" * 200
    samples = []
    with path.open("ab") as handle:
        for i in range(n + 20):
            start = time.perf_counter_ns()
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
            if i >= 20:
                samples.append(time.perf_counter_ns() - start)
    return samples


def _postgres_schema() -> tuple[str, Callable[[], None]] | None:
    try:
        import psycopg
    except ImportError:
        return None
    conninfo = POSTGRES_URL.replace("postgresql+psycopg://", "postgresql://", 1).split("?")[0]
    schema = f"koboi_bench_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=3) as connection:
            connection.execute(f'CREATE SCHEMA "{schema}"')
    except psycopg.OperationalError:
        return None

    def drop() -> None:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')

    sep = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{sep}options={quote(f'-csearch_path={schema}')}", drop


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 appends per store")
    parser.add_argument("-n", type=int, default=500, help="appends per store (default 500)")
    args = parser.parse_args()
    n = 100 if args.quick else args.n

    from koboi_store_sql import SQLStore

    rows: list[tuple[str, list[int] | None]] = []
    with tempfile.TemporaryDirectory(prefix="koboi-bench-", dir=os.environ.get("TMPDIR")) as tmp:
        directory = Path(tmp)
        rows.append(("memory:// (InMemoryStore)", await bench_store(InMemoryStore(), n)))
        rows.append(
            (
                "sqlite durability=power_loss (FULL)",
                await bench_store(SQLStore(f"sqlite:///{directory}/full.db"), n),
            )
        )
        rows.append(
            (
                "sqlite durability=process (NORMAL)",
                await bench_store(
                    SQLStore(f"sqlite:///{directory}/normal.db?durability=process"), n
                ),
            )
        )
        postgres = _postgres_schema()
        if postgres is None:
            rows.append((f"postgresql (unreachable: {POSTGRES_URL})", None))
        else:
            url, drop = postgres
            try:
                rows.append(
                    ("postgresql synchronous_commit=on", await bench_store(SQLStore(url), n))
                )
                rows.append(
                    (
                        "postgresql durability=process (off)",
                        await bench_store(SQLStore(url + "&durability=process"), n),
                    )
                )
            finally:
                drop()
        rows.append(("thread hop (to_thread no-op)", await bench_thread_hop(n)))
        rows.append(("raw write+fsync, 200 B (same disk)", bench_fsync(directory, n)))

    print(f"koboi store append cost: {n} sequential one-event appends per store")
    print(
        f"python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"tmp dir {tempfile.gettempdir()}"
    )
    print()
    print(f"{'store':<40} {'median µs':>10} {'p95 µs':>10}")
    print("-" * 62)
    for name, samples in rows:
        if samples is None:
            print(f"{name:<40} {'-':>10} {'-':>10}")
            continue
        median, p95 = _summary(samples)
        print(f"{name:<40} {median:>10.0f} {p95:>10.0f}")


if __name__ == "__main__":
    sys.exit(anyio.run(main))
