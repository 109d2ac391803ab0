"""Per-step cost of OpenTelemetry tracing: the same N-step tool loop with telemetry off
(no ``telemetry`` section: nothing of OpenTelemetry imported) and on (spans through the
batch processor to an OTLP/HTTP receiver on loopback, metrics kept), side by side, in one
process, alternating so that both see the same machine.

    uv run python benchmarks/otel/bench_otel.py            # N = 200, 9 runs of each
    uv run python benchmarks/otel/bench_otel.py --quick    # N = 50, 3 runs of each

Target: tracing adds at most 10% to the in-memory step cost (benchmarks/bench_loop.py).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_loop import InstantProvider, echo

from koboi import InMemoryStore, KoboiAgent

TARGET_OVERHEAD = 0.10


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that accepts and counts what it is sent (decoding is the
    collector's work, not the agent's)."""

    spans_bytes = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path == "/v1/traces":
            Receiver.spans_bytes += len(body)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def config(steps: int, endpoint: str | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "llm": {"provider": "scripted"},  # replaced by provider= below
        "agent": {"max_iterations": steps + 5},
        "store": {"url": "memory://"},
    }
    if endpoint is not None:
        data["telemetry"] = {"endpoint": endpoint, "metric_interval_seconds": 3600}
    return data


async def one_run(steps: int, endpoint: str | None) -> float:
    provider = InstantProvider(steps)
    agent = KoboiAgent.from_dict(
        config(steps, endpoint), provider=provider, store=InMemoryStore(), extra_tools=[echo]
    )
    async with agent:
        start = time.perf_counter()
        result = await agent.run("go")
        elapsed = time.perf_counter() - start
    if result.outcome != "completed" or result.steps != steps:
        raise RuntimeError(f"unexpected run: {result.outcome} after {result.steps} steps")
    return elapsed


def sdk_floor(steps: int, endpoint: str) -> float:
    """ms per step of the OpenTelemetry SDK alone doing the least a traced step needs: two
    spans (a model call's, a tool call's) with a few attributes, under a run's span,
    through the same batch processor and OTLP/HTTP exporter. No koboi code runs."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{endpoint}/v1/traces")))
    tracer = provider.get_tracer("floor")
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "instant"}
    try:
        with tracer.start_as_current_span("invoke_agent"):
            start = time.perf_counter()
            for n in range(steps):
                with tracer.start_as_current_span("chat instant", attributes=chat):
                    pass
                tool = {"gen_ai.tool.name": "echo", "gen_ai.tool.call.id": str(n)}
                with tracer.start_as_current_span("execute_tool echo", attributes=tool):
                    pass
            elapsed = time.perf_counter() - start
    finally:
        provider.shutdown()  # exports what is left while the receiver still listens
    return elapsed / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    steps, repeats = (50, 3) if args.quick else (200, 9)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"

    for warm in (None, endpoint):  # imports, pydantic caches, the exporter's connection
        asyncio.run(one_run(20, warm))
    off: list[float] = []
    on: list[float] = []
    for _ in range(repeats):
        for target, into in ((None, off), (endpoint, on)):
            gc.collect()
            into.append(asyncio.run(one_run(steps, target)) / steps * 1000)
    floor = [sdk_floor(steps, endpoint) for _ in range(repeats)]
    from koboi_otel.exporting import shutdown_all

    shutdown_all()  # exports what is left while the receiver still listens
    server.shutdown()

    off_ms, on_ms = statistics.median(off), statistics.median(on)
    overhead = on_ms / off_ms - 1
    print(f"OpenTelemetry tracing, {steps}-step tool loop, {repeats} runs each, medians:")
    print(f"  telemetry off : {off_ms:.3f} ms/step  (min {min(off):.3f})")
    print(f"  telemetry on  : {on_ms:.3f} ms/step  (min {min(on):.3f})  batch exporter, OTLP/HTTP")
    print(
        f"  added per step: {on_ms - off_ms:.3f} ms = {overhead:+.1%} "
        f"(target <= {TARGET_OVERHEAD:.0%}: {'met' if overhead <= TARGET_OVERHEAD else 'NOT met'})"
    )
    floor_ms = statistics.median(floor)
    print(
        f"  the SDK's floor: {floor_ms:.3f} ms/step = {floor_ms / off_ms:+.1%} of a step "
        "(two bare spans per step through the same exporter, no koboi code)"
    )
    print(f"  spans exported: {Receiver.spans_bytes} bytes of OTLP to the loopback receiver")


if __name__ == "__main__":
    main()
