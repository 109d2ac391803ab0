"""The cost of A2A on koboi serve: one A2A call against a direct /v1/chat call to the
same server, and streamed events per second.

One ``koboi serve`` process on 127.0.0.1 serves an agent whose scripted model answers
at once (no tool): ``ping`` → ``pong``; ``talk`` → a 2,000-word answer streamed word by
word. The client (this process) sends, one after the other, N times each:

- ``chat``: ``POST /v1/chat`` (httpx, kept-alive connection): a run in the request;
- ``a2a raw``: ``SendMessage`` (blocking) as JSON-RPC with the same httpx client: a job
  queued, claimed, run, and answered when it settles;
- ``a2a sdk``: the same through a2a-sdk's client (``ClientFactory``, non-streaming);
- ``a2a sdk stream``: ``SendStreamingMessage`` through a2a-sdk's client, to the final
  status.

Then the events per second of one long streamed answer: ``/v1/chat/stream`` SSE events
(text deltas) against A2A streamed events (artifact updates) through a2a-sdk's client.

    uv run python benchmarks/a2a/bench_a2a.py            # N = 40
    uv run python benchmarks/a2a/bench_a2a.py --quick    # N = 10
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import yaml

WORDS = 2000


def _config(tmp: Path, port: int) -> Path:
    config = {
        "agent": {"name": "bench", "mode": "act"},
        "llm": {
            "provider": "scripted",
            "rules": [
                {"match": r"^ping", "reply": "pong"},
                {"match": r"^talk", "reply": " ".join(f"w{i}" for i in range(WORDS))},
            ],
        },
        "sandbox": {"backend": "passthrough", "workdir": str(tmp / "work")},
        "store": {"url": f"sqlite:///{tmp / 'bench.db'}"},
        "server": {"port": port, "shared_sandbox": True, "access_log": False},
        "a2a": {"serve": {"url": f"http://127.0.0.1:{port}"}},
    }
    (tmp / "work").mkdir()
    path = tmp / "bench.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _keys(config: Path) -> tuple[str, str]:
    from koboi_cli.api import open_store, store_target
    from koboi_server import KeyRing

    async def main() -> tuple[str, str]:
        async with open_store(store_target(config)) as store:
            ring = KeyRing(store)
            _, operator = await ring.create("operator")
            _, peer = await ring.create("peer", scopes=["invoke"])
            return operator, peer

    return anyio.run(main)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _row(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    return f"{name:<16} {min(ms):8.1f} {statistics.median(ms):8.1f} {p90:8.1f}"


async def _timed(n: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    await call()  # warm up (connections, first job)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return times


def _message(text: str) -> Any:
    from a2a.types import a2a_pb2 as pb

    return pb.SendMessageRequest(
        message=pb.Message(
            message_id=uuid.uuid4().hex, role=pb.ROLE_USER, parts=[pb.Part(text=text)]
        )
    )


async def bench(base: str, operator: str, peer: str, n: int) -> None:
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import a2a_pb2 as pb

    api = httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {operator}"}, timeout=60
    )
    a2a_http = httpx.AsyncClient(headers={"Authorization": f"Bearer {peer}"}, timeout=60)
    card = await A2ACardResolver(a2a_http, base).get_agent_card()
    blocking = ClientFactory(ClientConfig(streaming=False, httpx_client=a2a_http)).create(card)
    streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=a2a_http)).create(card)

    async def chat() -> None:
        answer = await api.post("/v1/chat", json={"message": "ping"})
        assert answer.json()["output"] == "pong", answer.text

    async def raw() -> None:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": uuid.uuid4().hex,
                    "role": "ROLE_USER",
                    "parts": [{"text": "ping"}],
                }
            },
        }
        answer = await a2a_http.post(base + "/v1/a2a", json=body, headers={"A2A-Version": "1.0"})
        task = answer.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer.text

    async def sdk() -> None:
        async for event in blocking.send_message(_message("ping")):
            assert event.task.status.state == pb.TASK_STATE_COMPLETED

    async def sdk_stream() -> None:
        last = None
        async for event in streaming.send_message(_message("ping")):
            last = event
        assert last is not None and last.status_update.status.state == pb.TASK_STATE_COMPLETED

    print(f"round trip, instant model, N = {n} each (ms)")
    print(f"{'':<16} {'min':>8} {'median':>8} {'p90':>8}")
    results = {}
    for name, call in (
        ("chat", chat),
        ("a2a raw", raw),
        ("a2a sdk", sdk),
        ("a2a sdk stream", sdk_stream),
    ):
        results[name] = await _timed(n, call)
        print(_row(name, results[name]), flush=True)
    base_median = statistics.median(results["chat"])
    for name in ("a2a raw", "a2a sdk", "a2a sdk stream"):
        extra = (statistics.median(results[name]) - base_median) * 1000
        print(f"overhead of {name} over chat: {extra:+.1f} ms (median)")

    # Streamed events per second of one long answer.
    start = time.perf_counter()
    sse = 0
    async with api.stream("POST", "/v1/chat/stream", json={"message": "talk"}) as stream:
        async for line in stream.aiter_lines():
            if line.startswith("event:"):
                sse += 1
    chat_seconds = time.perf_counter() - start
    start = time.perf_counter()
    events = 0
    async for _ in streaming.send_message(_message("talk")):
        events += 1
    a2a_seconds = time.perf_counter() - start
    print(f"\nstreamed events of a {WORDS}-word answer")
    print(f"{'':<16} {'events':>8} {'seconds':>8} {'events/s':>10}")
    print(f"{'chat SSE':<16} {sse:8d} {chat_seconds:8.2f} {sse / chat_seconds:10.0f}")
    print(f"{'a2a sdk stream':<16} {events:8d} {a2a_seconds:8.2f} {events / a2a_seconds:10.0f}")
    await blocking.close()
    await streaming.close()
    await api.aclose()
    await a2a_http.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10")
    parser.add_argument("-n", type=int, default=40)
    args = parser.parse_args()
    n = 10 if args.quick else args.n
    with tempfile.TemporaryDirectory() as tmp:
        port = _port()
        config = _config(Path(tmp), port)
        operator, peer = _keys(config)
        log = Path(tmp) / "serve.log"
        with log.open("w") as out:
            server = subprocess.Popen(
                [sys.executable, "-m", "koboi_cli", "serve", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "KOBOI_STRICT_PLUGINS": "1"},
            )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"koboi serve did not start:\n{log.read_text()}")
                time.sleep(0.1)
            print(f"koboi serve on {base} (one process, SQLite store), 2 CPU cores shared\n")
            anyio.run(bench, base, operator, peer, n)
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
