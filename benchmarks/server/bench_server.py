"""Throughput, latency and memory of ``koboi serve`` with the scripted model.

One real ``koboi serve`` process (or several sharing PostgreSQL) on 127.0.0.1,
an agent whose every chat is one tool step (the scripted model calls the
``calculator`` tool, then answers), durable writes (SQLite ``synchronous=FULL``
by default). For each concurrency it prints chats/s and p50/p99 latency of
``POST /v1/chat``; it prints the idle RSS of each replica before the load,
right after it, and after the replica has been idle again.

    uv run python benchmarks/server/bench_server.py                    # ~40 s
    uv run python benchmarks/server/bench_server.py --quick            # smoke run
    uv run python benchmarks/server/bench_server.py \\
        --store "postgresql+psycopg://postgres@127.0.0.1:5432/test" --replicas 2

Targets (issue 7): >= 180 chats/s on one replica (SQLite, durable writes);
idle RSS < 60 MB; RSS after the load back within 1.5x idle.

The load generator runs on the same machine (it competes for the CPU with the
server), so the figures are a lower bound of what the server does alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

CONFIG = """
agent: {{name: bench, mode: act, max_iterations: 4}}
llm:
  provider: scripted
  rules:
    - match: '(?P<expr>\\d+ \\+ \\d+)'
      tool: calculator
      arguments: {{expression: "{{expr}}"}}
      reply: "{{expr}} = {{result}}"
tools: {{builtin: [calculator]}}
store: {{url: "{store}"}}
server: {{access_log: false, max_concurrent_runs: 256, max_runs_per_principal: 256}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def koboi(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "koboi_cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=True,
        timeout=120,
    )
    return done.stdout.strip()


def start_server(config: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "koboi_cli", "serve", str(config), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=config.parent,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("koboi serve did not start")


async def load(
    urls: list[str], key: str, concurrency: int, seconds: float
) -> tuple[int, list[float]]:
    latencies: list[float] = []
    done = 0
    stop = time.perf_counter() + seconds
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def worker(index: int, client: httpx.AsyncClient) -> None:
        nonlocal done
        n = 0
        url = urls[index % len(urls)]
        while time.perf_counter() < stop:
            n += 1
            started = time.perf_counter()
            answer = await client.post(
                url + "/v1/chat", json={"message": f"{index} + {n}"}, headers=headers
            )
            latencies.append(time.perf_counter() - started)
            body = answer.json()
            if answer.status_code != 200 or body.get("outcome") != "completed":
                raise SystemExit(f"chat failed: {answer.status_code} {body}")
            done += 1

    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await asyncio.gather(*(worker(i, client) for i in range(concurrency)))
    return done, latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="", help="store URL (default: SQLite in a temp dir)")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=8.0, help="per concurrency level")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.idle_seconds = 2.0, 1.0
    if args.store.startswith("memory:"):
        raise SystemExit("the server's keys need a durable store: give sqlite:/// or postgresql://")

    with tempfile.TemporaryDirectory(prefix="koboi-bench-server-") as tmp:
        directory = Path(tmp)
        store = args.store or "sqlite:///koboi.db"
        schema = None
        plain = store.split("?")[0].replace("postgresql+psycopg://", "postgresql://")
        if store.startswith("postgresql"):
            import psycopg

            schema = f"koboi_bench_{uuid.uuid4().hex[:8]}"  # a schema of its own, dropped after
            with psycopg.connect(plain, autocommit=True) as conn:
                conn.execute(f'CREATE SCHEMA "{schema}"')
            store = f"{store.split('?')[0]}?options=-csearch_path%3D{schema}"
        config = directory / "agent.yaml"
        config.write_text(CONFIG.format(store=store))
        key = koboi(
            "keys", "create", "--config", str(config), "--principal", "bench", cwd=directory
        )
        ports = [free_port() for _ in range(args.replicas)]
        procs = [start_server(config, port) for port in ports]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        try:
            time.sleep(args.idle_seconds)
            idle = [rss_mb(p.pid) for p in procs]
            results: dict[str, Any] = {
                "store": store.split("?")[0].split("@")[-1],
                "replicas": args.replicas,
                "idle_rss_mb": [round(x, 1) for x in idle],
                "levels": [],
            }
            asyncio.run(load(urls, key, 4, 1.0))  # warm-up
            for concurrency in [int(c) for c in args.concurrency.split(",")]:
                cpu_before = sum(cpu_seconds(p.pid) for p in procs)
                count, latencies = asyncio.run(load(urls, key, concurrency, args.seconds))
                cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu_before
                level = {
                    "concurrency": concurrency,
                    "chats_per_s": round(count / args.seconds, 1),
                    "p50_ms": round(statistics.median(latencies) * 1000, 1),
                    "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
                    # Server CPU per chat: what the figures would be bound by on an
                    # idle machine (the load generator and other work share the cores).
                    "server_cpu_ms_per_chat": round(cpu / max(count, 1) * 1000, 2),
                }
                results["levels"].append(level)
                print(
                    f"concurrency {concurrency:>3}: {level['chats_per_s']:>7} chats/s  "
                    f"p50 {level['p50_ms']:>6} ms  p99 {level['p99_ms']:>6} ms  "
                    f"server CPU {level['server_cpu_ms_per_chat']:>5} ms/chat",
                    flush=True,
                )
            after = [rss_mb(p.pid) for p in procs]
            time.sleep(args.idle_seconds)
            settled = [rss_mb(p.pid) for p in procs]
            results["rss_after_load_mb"] = [round(x, 1) for x in after]
            results["rss_idle_again_mb"] = [round(x, 1) for x in settled]
            print(
                f"RSS per replica: idle {results['idle_rss_mb']} MB, after load "
                f"{results['rss_after_load_mb']} MB, idle again {results['rss_idle_again_mb']} MB"
            )
            print(json.dumps(results))
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
            if schema is not None:
                import psycopg

                with psycopg.connect(plain, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
