"""The provider layer's cost: SSE parse throughput and per-call overhead over raw httpx.

Everything runs against a local HTTP server (koboi_testing.wire.WireServer on
127.0.0.1, in a process of its own) speaking the OpenAI Chat Completions wire
format, so the network and the server cost the same for both sides of each
comparison. Prints:

1. SSE parse throughput, in memory: a 1000-token OpenAI stream body fed to
   koboi_http.SSEDecoder in 64-byte pieces (framing only), and the same plus
   the OpenAI chunk assembly (json per event, text and tool-call deltas) —
   tokens per second.
2. Streaming throughput end to end: OpenAIProvider.stream() of a 1000-token
   reply from the local server, tokens per second.
3. Per-call overhead against a raw httpx call to the same server (same body,
   same reply), interleaved, median and min of N calls:
   - a 1-token reply, non-streaming: provider.complete() vs httpx post + json;
   - a 1000-token reply, streaming, sent as fast as the server can: vs httpx
     reading every byte (the transport's floor, no parsing at all), and vs
     httpx plus the least parsing that yields the text (aiter_lines, json
     per data line, take the content) — what one would write by hand;
   - the same 1000-token stream paced by a 0.5 ms pause before each chunk
     (about 1000 tokens/s on this server: still faster than hosted models
     stream), vs raw bytes.
   Target: under 10 % on the 1-token call; indistinguishable (within the
   run-to-run noise) on the 1000-token stream.

    uv run python benchmarks/providers/bench_providers.py            # ~30 s
    uv run python benchmarks/providers/bench_providers.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import httpx

from koboi.messages import Message, ModelRequest, ResponseDone
from koboi_http import SSEDecoder
from koboi_openai.config import OpenAIOptions
from koboi_openai.provider import OpenAIProvider
from koboi_openai.stream import StreamAssembler
from koboi_testing.wire import Reply, WireServer, sse_frame

REQUEST = ModelRequest(messages=[Message.system("Be brief."), Message.user("Say hi.")])
BODY = {
    "model": "bench-model",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hi."},
    ],
}


def completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
    }


def stream_events(tokens: int) -> list[Any]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "bench-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    events: list[Any] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": f" tok{i}"}) for i in range(tokens)]
    events.append(chunk({}, "stop"))
    events.append(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "bench-model",
            "choices": [],
            "usage": {
                "prompt_tokens": 12,
                "completion_tokens": tokens,
                "total_tokens": tokens + 12,
            },
        }
    )
    events.append("[DONE]")
    return events


def serve(paced: bool) -> None:
    """Child process: serve the two canned replies until stdin closes."""
    tokens = 1000
    one_token = Reply.json(completion("Hi"))
    long_stream = Reply.sse(stream_events(tokens), delay=0.0005 if paced else 0.0)
    with WireServer() as server:
        server.handler = lambda request: long_stream if request.json().get("stream") else one_token
        print(server.url, flush=True)
        sys.stdin.read()


@contextmanager
def server_process(*, paced: bool = False) -> Iterator[str]:
    """The wire server in a process of its own, so it never competes for this one's GIL."""
    argv = [sys.executable, __file__, "--serve", *(["--paced"] if paced else [])]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        yield child.stdout.readline().strip()
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)


def parse_throughput(tokens: int, repeats: int) -> tuple[float, float]:
    body = b"".join(sse_frame(e) for e in stream_events(tokens))
    pieces = [body[i : i + 64] for i in range(0, len(body), 64)]
    framing: list[float] = []
    assembly: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        decoder = SSEDecoder()
        count = 0
        for piece in pieces:
            count += len(decoder.feed(piece))
        framing.append(time.perf_counter() - started)
        assert count == tokens + 4

        started = time.perf_counter()
        decoder = SSEDecoder()
        assembler = StreamAssembler()
        for piece in pieces:
            for event in decoder.feed(piece):
                if event.data != "[DONE]":
                    assembler.add(json.loads(event.data))
        assembly.append(time.perf_counter() - started)
    return tokens / min(framing), tokens / min(assembly)


async def timed(fn: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


async def compare(
    calls: int,
    provider_call: Callable[[], Awaitable[None]],
    raw_call: Callable[[], Awaitable[None]],
) -> tuple[list[float], list[float]]:
    for _ in range(min(20, calls)):  # warm both connection pools
        await provider_call()
        await raw_call()
    ours: list[float] = []
    raw: list[float] = []
    for _ in range(calls):
        ours.append(await timed(provider_call))
        raw.append(await timed(raw_call))
    return ours, raw


def report(label: str, ours: list[float], raw: list[float]) -> None:
    def ms(values: list[float]) -> str:
        return f"median {statistics.median(values) * 1e3:7.3f} ms  min {min(values) * 1e3:7.3f} ms"

    overhead_median = statistics.median(ours) / statistics.median(raw) - 1
    overhead_min = min(ours) / min(raw) - 1
    print(f"  {label}")
    print(f"    raw httpx      {ms(raw)}")
    print(f"    koboi-openai   {ms(ours)}")
    print(f"    overhead       median {overhead_median:+.1%}   min {overhead_min:+.1%}")


async def main(quick: bool) -> None:
    calls = 60 if quick else 400
    stream_calls = 10 if quick else 60
    tokens = 1000
    print(f"python {platform.python_version()} on {platform.machine()}, {platform.system()}")

    framing, assembly = parse_throughput(tokens, 3 if quick else 20)
    print(f"\n1. SSE parse throughput, in memory ({tokens}-token OpenAI stream, 64-byte pieces)")
    print(f"  framing only (SSEDecoder)          {framing:12,.0f} tokens/s")
    print(f"  framing + json + chunk assembly    {assembly:12,.0f} tokens/s")

    with server_process() as url, server_process(paced=True) as paced_url:
        options = OpenAIOptions(model="bench-model", base_url=url + "/v1", max_retries=0)
        paced_options = OpenAIOptions(model="bench-model", base_url=paced_url + "/v1")
        provider = OpenAIProvider(options)
        paced_provider = OpenAIProvider(paced_options)
        async with (
            httpx.AsyncClient(base_url=url + "/v1/") as client,
            httpx.AsyncClient(base_url=paced_url + "/v1/") as paced_client,
        ):

            async def provider_complete() -> None:
                response = await provider.complete(REQUEST)
                assert response.message.content == "Hi"

            async def raw_complete() -> None:
                reply = await client.post("chat/completions", json=BODY)
                assert reply.json()["choices"][0]["message"]["content"] == "Hi"

            async def provider_stream(which: OpenAIProvider = provider) -> None:
                async for event in which.stream(REQUEST):
                    if isinstance(event, ResponseDone):
                        assert event.response.usage.output_tokens == tokens

            async def raw_stream(which: httpx.AsyncClient = client) -> None:
                async with which.stream(
                    "POST", "chat/completions", json={**BODY, "stream": True}
                ) as reply:
                    async for _ in reply.aiter_bytes():
                        pass

            async def hand_parsed_stream() -> None:
                text: list[str] = []
                async with client.stream(
                    "POST", "chat/completions", json={**BODY, "stream": True}
                ) as reply:
                    async for line in reply.aiter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            choices = json.loads(line[6:])["choices"]
                            if choices and choices[0]["delta"].get("content"):
                                text.append(choices[0]["delta"]["content"])
                assert len(text) == tokens

            async def paced_ours() -> None:
                await provider_stream(paced_provider)

            async def paced_raw() -> None:
                await raw_stream(paced_client)

            started = time.perf_counter()
            deltas = 0
            for _ in range(5 if quick else 20):
                async for event in provider.stream(REQUEST):
                    deltas += not isinstance(event, ResponseDone)
            elapsed = time.perf_counter() - started
            print(f"\n2. Streaming end to end from the local server ({tokens}-token replies)")
            print(f"  OpenAIProvider.stream()            {deltas / elapsed:12,.0f} tokens/s")

            print(
                f"\n3. Per-call overhead over raw httpx, same server, interleaved ({calls} calls)"
            )
            ours, raw = await compare(calls, provider_complete, raw_complete)
            report("1-token reply, non-streaming (target: overhead < 10 %)", ours, raw)
            ours, raw = await compare(stream_calls, provider_stream, raw_stream)
            report(f"{tokens}-token reply, streaming at full speed, vs raw bytes", ours, raw)
            ours, raw = await compare(stream_calls, provider_stream, hand_parsed_stream)
            report(
                f"{tokens}-token reply, streaming at full speed, vs hand-parsed httpx", ours, raw
            )
            ours, raw = await compare(max(3, stream_calls // 6), paced_ours, paced_raw)
            rate = tokens / statistics.median(raw)
            report(
                f"{tokens}-token reply, paced (0.5 ms pause per chunk: {rate:,.0f} tokens/s "
                "measured), vs raw bytes (target: indistinguishable)",
                ours,
                raw,
            )
        await provider.aclose()
        await paced_provider.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: fewer calls")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--paced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.paced)
    else:
        anyio.run(main, args.quick)
    sys.exit(0)
