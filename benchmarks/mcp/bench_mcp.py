"""MCP through koboi: what one tool call costs beyond the MCP SDK itself, and how many
calls per second ``koboi mcp-serve`` answers.

1. **Client overhead**, one server, side by side in one run (blocks interleaved so
   both see the same machine): the same tool of the same server (the SDK-written
   notes server, ``examples/mcp/notes_server.py``; its ``environment`` tool does no
   I/O) called
   - with the SDK's own ``ClientSession`` (``mcp.Client``) directly — the floor;
   - through koboi's MCP tool (the toolset's connection: naming, result conversion,
     the elicitation and progress plumbing), no pipeline;
   - as a governed call, ``agent.call_tool`` (the whole pipeline, journal and audit)
     on the memory store, and on SQLite (the journal's own commits).
   Over stdio (the server a process of the agent's sandbox) and streamable HTTP
   (the server on 127.0.0.1, behind the SSRF guard).
2. **Server throughput**: calls per second of a safe tool (``calculator``) through
   ``koboi mcp-serve`` over stdio, each call a governed, journaled session of its
   own (SQLite store), sequential and 8 at a time; the SDK's own high-level server
   answering the same kind of call beside it.

    uv run python benchmarks/mcp/bench_mcp.py            # ~1 min
    uv run python benchmarks/mcp/bench_mcp.py --quick    # smoke run

Target: koboi's extra per call ≤ 1 ms on stdio, plus the journal's own commits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "examples" / "mcp" / "notes_server.py"
TARGET_MS = 1.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_http_server(port: int) -> subprocess.Popen[bytes]:
    """The notes server on 127.0.0.1:port (set up before anything is timed)."""
    process = subprocess.Popen(
        [sys.executable, str(NOTES), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            break
        time.sleep(0.05)
    return process


async def _timed(call: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _row(label: str, times: list[float], floor: float | None = None) -> str:
    median = statistics.median(times)
    p90 = statistics.quantiles(times, n=10)[-1]
    extra = f"   +{median - floor:6.3f} ms over the SDK" if floor is not None else ""
    return f"  {label:44} median {median:7.3f} ms   p90 {p90:7.3f} ms{extra}"


@contextlib.asynccontextmanager
async def _sdk_client(transport: str, url: str | None) -> AsyncIterator[Any]:
    from mcp import Client, StdioServerParameters

    if transport == "stdio":
        server: Any = StdioServerParameters(
            command=sys.executable, args=[str(NOTES)], env={"PATH": os.environ["PATH"]}
        )
    else:
        server = url
    async with Client(server, cache=None) as client:
        yield client


def _agent_config(transport: str, url: str | None, store: str) -> dict[str, Any]:
    server: dict[str, Any]
    if transport == "stdio":
        server = {"command": sys.executable, "args": [str(NOTES)]}
    else:
        server = {"transport": "http", "url": url, "allow_private": True}
    return {
        "agent": {"name": "bench", "mode": "act"},
        "llm": {"provider": "scripted"},
        "store": {"url": store},
        "mcp": {"servers": {"notes": server}},
    }


async def client_overhead(transport: str, n: int, blocks: int, workdir: Path) -> None:
    from koboi import KoboiAgent
    from koboi.tools import ToolContext

    url = None
    process = None
    if transport == "http":
        port = _free_port()
        process = _start_http_server(port)
        url = f"http://127.0.0.1:{port}/mcp"
    arguments = {"name": "PATH"}
    results: dict[str, list[float]] = {"sdk": [], "tool": [], "memory": [], "sqlite": []}
    try:
        async with (
            _sdk_client(transport, url) as sdk,
            KoboiAgent.from_dict(_agent_config(transport, url, "memory://")) as in_memory,
            KoboiAgent.from_dict(
                _agent_config(transport, url, f"sqlite:///{workdir / f'{transport}.db'}")
            ) as on_sqlite,
        ):
            tool: Any = in_memory.tools["notes__environment"]
            ctx = ToolContext(session_id="bench", call_id="c", step=0, sandbox=in_memory.sandbox)
            args = tool.parse_arguments(arguments)

            async def by_sdk() -> Any:
                return await sdk.call_tool("environment", arguments)

            async def by_tool() -> Any:
                return await tool(args, ctx)

            async def governed(agent: Any) -> Any:
                called = await agent.call_tool("notes__environment", arguments)
                assert called.ok, called.content
                return called

            variants: dict[str, Callable[[], Awaitable[Any]]] = {
                "sdk": by_sdk,
                "tool": by_tool,
                "memory": lambda: governed(in_memory),
                "sqlite": lambda: governed(on_sqlite),
            }
            for call in variants.values():  # warm up
                await _timed(call, 20)
            # Small blocks, interleaved in a shuffled order: a busy machine (or whatever
            # ran just before) slows every variant alike.
            order = random.Random(0)
            for _ in range(blocks):
                names = list(variants)
                order.shuffle(names)
                for name in names:
                    results[name] += await _timed(variants[name], n)
    finally:
        if process is not None:
            process.kill()
            process.wait()
    floor = statistics.median(results["sdk"])
    extra = statistics.median(results["tool"]) - floor
    print(f"\n{transport}: one tools/call of the same server ({len(results['sdk'])} calls each)")
    print(_row("the SDK's ClientSession (mcp.Client), direct", results["sdk"]))
    print(_row("koboi's MCP tool (toolset connection)", results["tool"], floor))
    print(_row("agent.call_tool, governed, memory store", results["memory"], floor))
    print(_row("agent.call_tool, governed, SQLite journal", results["sqlite"], floor))
    verdict = "within" if extra <= TARGET_MS else "OVER"
    print(
        f"  koboi's MCP layer adds {extra:.3f} ms per call: {verdict} the {TARGET_MS:g} ms target"
    )


async def server_throughput(n: int, workdir: Path) -> None:
    from mcp import Client, StdioServerParameters

    config = workdir / "served.yaml"
    config.write_text(
        "agent: {name: served, mode: act}\n"
        "llm: {provider: scripted}\n"
        "tools: {builtin: [calculator]}\n"
        f"store: {{url: 'sqlite:///{workdir / 'served.db'}'}}\n"
    )
    served = StdioServerParameters(
        command=sys.executable,
        args=["-m", "koboi_cli", "mcp-serve", str(config)],
        env={"PATH": os.environ["PATH"]},
    )
    sdk_server = StdioServerParameters(
        command=sys.executable, args=[str(NOTES)], env={"PATH": os.environ["PATH"]}
    )

    async def rate(server: Any, tool: str, arguments: dict[str, Any], concurrency: int) -> float:
        async with Client(server, cache=None) as client:
            for _ in range(10):
                await client.call_tool(tool, arguments)
            started = time.perf_counter()
            per_worker = n // concurrency

            async def worker() -> None:
                for _ in range(per_worker):
                    result = await client.call_tool(tool, arguments)
                    assert not result.is_error

            async with anyio.create_task_group() as tasks:
                for _ in range(concurrency):
                    tasks.start_soon(worker)
            return per_worker * concurrency / (time.perf_counter() - started)

    print(f"\nserver: calls per second over stdio ({n} calls each)")
    for concurrency in (1, 8):
        ours = await rate(served, "calculator", {"expression": "6 * 7"}, concurrency)
        theirs = await rate(sdk_server, "environment", {"name": "PATH"}, concurrency)
        print(
            f"  {concurrency} at a time: koboi mcp-serve (calculator, governed, a journaled "
            f"session per call, SQLite) {ours:7.0f}/s   the SDK's MCPServer (no journal) "
            f"{theirs:7.0f}/s"
        )


async def main(quick: bool) -> None:
    n, blocks, served = (10, 3, 60) if quick else (10, 40, 400)
    with tempfile.TemporaryDirectory(prefix="koboi-bench-mcp-") as work:
        workdir = Path(work)
        await client_overhead("stdio", n, blocks, workdir)
        await client_overhead("http", n, blocks, workdir)
        await server_throughput(served, workdir)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer calls")
    anyio.run(main, parser.parse_args().quick)
