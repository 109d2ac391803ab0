"""Chat completions per second on ``koboi serve``, side by side with ``/v1/chat``.

One real ``koboi serve`` process on 127.0.0.1 (SQLite, durable writes), the scripted
model, and a one-step conversation: one user message, which the model answers by
calling the ``calculator`` tool and then replying (two model calls, one tool call:
the same run ``benchmarks/server/bench_server.py`` measures). For each concurrency
(1 / 8 / 32) the same server is loaded, in turn, through

- ``POST /v1/chat`` (koboi's own JSON route),
- ``POST /v1/chat/completions`` (koboi-openai-compat, JSON),
- ``POST /v1/chat/stream`` (koboi's own SSE, read to its ``final``),
- ``POST /v1/chat/completions`` with ``stream: true`` (read to ``data: [DONE]``),

each for ``--seconds``; it prints requests/s, p50/p99 latency and the server's CPU
per request, and every answer is checked (status, text) so nothing is counted that
failed.

    uv run python benchmarks/openai_compat/bench_openai_compat.py            # ~1 min
    uv run python benchmarks/openai_compat/bench_openai_compat.py --quick    # smoke run

The load generator (httpx) runs on the same machine and competes with the server
for the CPU: the figures are a lower bound, comparable with each other.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
# The server benchmark's helpers (start a server, make a key, read /proc): one copy.
_spec = importlib.util.spec_from_file_location(
    "bench_server", ROOT / "benchmarks" / "server" / "bench_server.py"
)
assert _spec is not None and _spec.loader is not None
bs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bs)

Ask = Callable[[httpx.AsyncClient, str, int, int], Awaitable[None]]


async def via_chat(client: httpx.AsyncClient, url: str, a: int, b: int) -> None:
    answer = await client.post(url + "/v1/chat", json={"message": f"{a} + {b}"})
    body = answer.json()
    if answer.status_code != 200 or body.get("output") != f"{a} + {b} = {a + b}":
        raise SystemExit(f"/v1/chat failed: {answer.status_code} {body}")


def _messages(a: int, b: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{a} + {b}"}]


async def via_completions(client: httpx.AsyncClient, url: str, a: int, b: int) -> None:
    answer = await client.post(
        url + "/v1/chat/completions", json={"model": "bench", "messages": _messages(a, b)}
    )
    body = answer.json()
    text = body.get("choices", [{}])[0].get("message", {}).get("content")
    if answer.status_code != 200 or text != f"{a} + {b} = {a + b}":
        raise SystemExit(f"/v1/chat/completions failed: {answer.status_code} {body}")


async def via_stream(client: httpx.AsyncClient, url: str, a: int, b: int) -> None:
    request = {"model": "bench", "messages": _messages(a, b), "stream": True}
    text = []
    done = False
    async with client.stream("POST", url + "/v1/chat/completions", json=request) as answer:
        if answer.status_code != 200:
            raise SystemExit(f"streamed completion failed: {answer.status_code}")
        async for line in answer.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                for choice in json.loads(line[6:]).get("choices", ()):
                    text.append(choice["delta"].get("content") or "")
    if not done or "".join(text) != f"{a} + {b} = {a + b}":
        raise SystemExit(f"streamed completion incomplete: {''.join(text)!r}, [DONE]: {done}")


async def via_chat_stream(client: httpx.AsyncClient, url: str, a: int, b: int) -> None:
    final = None
    async with client.stream(
        "POST", url + "/v1/chat/stream", json={"message": f"{a} + {b}"}
    ) as answer:
        if answer.status_code != 200:
            raise SystemExit(f"/v1/chat/stream failed: {answer.status_code}")
        event = ""
        async for line in answer.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "final":
                final = json.loads(line[6:])
    if final is None or final.get("output") != f"{a} + {b} = {a + b}":
        raise SystemExit(f"/v1/chat/stream ended without the answer: {final}")


ROUTES: list[tuple[str, Ask]] = [
    ("/v1/chat", via_chat),
    ("/v1/chat/completions", via_completions),
    ("/v1/chat/stream", via_chat_stream),
    ("  ... stream: true", via_stream),
]


async def load(url: str, key: str, ask: Ask, concurrency: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def worker(index: int, client: httpx.AsyncClient) -> None:
        n = 0
        while time.perf_counter() < stop:
            n += 1
            started = time.perf_counter()
            await ask(client, url, index, n)
            latencies.append(time.perf_counter() - started)

    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=120, limits=limits, headers=headers) as client:
        await asyncio.gather(*(worker(i, client) for i in range(concurrency)))
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per route and concurrency")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 1.5
    with tempfile.TemporaryDirectory(prefix="koboi-bench-openai-") as tmp:
        directory = Path(tmp)
        config = directory / "agent.yaml"
        config.write_text(bs.CONFIG.format(store="sqlite:///koboi.db"))
        key = bs.koboi(
            "keys", "create", "--config", str(config), "--principal", "bench", cwd=directory
        )
        port = bs.free_port()
        proc = bs.start_server(config, port)
        url = f"http://127.0.0.1:{port}"
        results: list[dict[str, Any]] = []
        try:
            for _, ask in ROUTES:  # warm-up
                asyncio.run(load(url, key, ask, 4, 0.5))
            print(
                f"{'concurrency':>11}  {'route':<22} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} "
                f"{'server CPU ms/req':>18}"
            )
            for concurrency in [int(c) for c in args.concurrency.split(",")]:
                for name, ask in ROUTES:
                    cpu_before = bs.cpu_seconds(proc.pid)
                    latencies = asyncio.run(load(url, key, ask, concurrency, args.seconds))
                    cpu = bs.cpu_seconds(proc.pid) - cpu_before
                    count = len(latencies)
                    row = {
                        "concurrency": concurrency,
                        "route": name.strip(),
                        "per_s": round(count / args.seconds, 1),
                        "p50_ms": round(statistics.median(latencies) * 1000, 1),
                        "p99_ms": round(bs.percentile(latencies, 0.99) * 1000, 1),
                        "server_cpu_ms": round(cpu / max(count, 1) * 1000, 2),
                    }
                    results.append(row)
                    print(
                        f"{concurrency:>11}  {name:<22} {row['per_s']:>7} {row['p50_ms']:>8} "
                        f"{row['p99_ms']:>8} {row['server_cpu_ms']:>18}",
                        flush=True,
                    )
            print(json.dumps(results))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
