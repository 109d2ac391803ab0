"""The plugin as the kernel sees it: entry point, registration, cheap import, a whole agent run."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from typing import Any

import pytest

import koboi_http.plugin
from koboi import KoboiAgent
from koboi.plugins import PluginHost
from koboi.tracing import TraceContext
from koboi_openai.config import OpenAIOptions
from koboi_openai.provider import OpenAIProvider
from koboi_testing.wire import Received, Reply, WireServer


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "openai"]
    assert ep.value == "koboi_openai.plugin"
    assert ep.dist is not None and ep.dist.name == "koboi-openai"


def test_registers_the_openai_provider(host: PluginHost) -> None:
    entry = host.catalog().providers.get("openai")
    assert entry is not None
    assert entry.plugin == "openai"
    assert entry.options is OpenAIOptions
    options = OpenAIOptions(model="llama3.1", base_url="http://localhost:11434/v1")
    provider = entry.target(options)
    assert isinstance(provider, OpenAIProvider)
    assert (provider.name, provider.model) == ("openai", "llama3.1")


def test_loading_and_registering_does_not_import_httpx() -> None:
    code = (
        "import sys\n"
        "from koboi.plugins import PluginHost\n"
        "import koboi_openai.plugin\n"
        "host = PluginHost(load_entry_points=False, strict=True)\n"
        "host.add_plugin(koboi_openai.plugin, 'openai')\n"
        "assert host.catalog().providers.get('openai') is not None\n"
        "print('httpx' in sys.modules, 'koboi_openai.provider' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.split() == ["False", "False"]


def _calculator_model(wire: Any) -> Any:
    """A scripted model behind the wire: calls calculator, then reports its result."""

    def answer(request: Received) -> Reply:
        body = request.json()
        streaming = bool(body.get("stream"))
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if not results:
            arguments = json.dumps({"expression": "1234 * 5678"})
            if streaming:
                return Reply.sse(
                    wire.tool_chunks([("call_calc", "calculator", arguments)], piece=4),
                    chunk_size=9,
                )
            calls = [wire.call("call_calc", "calculator", arguments)]
            return Reply.json(wire.completion(None, tool_calls=calls))
        text = f"1234 * 5678 = {results[-1]['content']}."
        if streaming:
            return Reply.sse(wire.text_chunks([text[:6], text[6:]], usage=wire.usage(50, 9)))
        return Reply.json(wire.completion(text, usage=wire.usage(50, 9)))

    return answer


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [True, False])
async def test_an_agent_runs_a_tool_using_turn_over_the_wire(
    host: PluginHost, server: WireServer, wire: Any, stream: bool
) -> None:
    server.handler = _calculator_model(wire)
    config = {
        "agent": {
            "name": "calc",
            "system_prompt": "Use the calculator.",
            "stream": stream,
            "max_iterations": 4,
        },
        "llm": {
            "provider": "openai",
            "model": "llama3.1",
            "base_url": f"{server.url}/v1",
            "retry_initial_delay": 0.01,
        },
        "tools": {"builtin": ["calculator"]},
        "store": {"url": "memory://"},
    }
    async with KoboiAgent.from_dict(config, host=host) as agent:
        result = await agent.run("What is 1234 * 5678?")
    assert result.outcome == "completed", result.error
    assert result.output == "1234 * 5678 = 7006652."
    assert len(server.requests) == 2

    first, second = (r.json() for r in server.requests)
    assert first["messages"] == [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": "What is 1234 * 5678?"},
    ]
    assert [t["function"]["name"] for t in first["tools"]] == ["calculator"]
    assert first.get("stream", False) is stream
    # The second call carries the whole turn: the call and its result.
    assistant, tool_result = second["messages"][2:4]
    assert assistant["tool_calls"] == [
        {
            "id": "call_calc",
            "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression":"1234 * 5678"}'},
        }
    ]
    assert tool_result == {"role": "tool", "tool_call_id": "call_calc", "content": "7006652"}
    assert all("authorization" not in r.headers for r in server.requests)
    assert result.usage.input_tokens >= 50


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [True, False])
async def test_every_model_call_of_a_run_carries_the_run_s_trace(
    host: PluginHost, server: WireServer, wire: Any, stream: bool
) -> None:
    """With koboi-http's plugin loaded, each Chat Completions request of a run carries its
    ``traceparent``: the trace id the caller gave, a new span id per request."""
    host.add_plugin(koboi_http.plugin, "http", dist="koboi-http")
    server.handler = _calculator_model(wire)
    parent = TraceContext("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "01", "k=v")
    config = {
        "agent": {"stream": stream, "max_iterations": 4},
        "llm": {"provider": "openai", "model": "llama3.1", "base_url": f"{server.url}/v1"},
        "tools": {"builtin": ["calculator"]},
        "store": {"url": "memory://"},
    }
    async with KoboiAgent.from_dict(config, host=host) as agent:
        result = await agent.run("What is 1234 * 5678?", trace=parent)
    assert result.outcome == "completed", result.error
    sent = [TraceContext.parse(r.headers["traceparent"]) for r in server.requests]
    assert len(sent) == 2
    assert all(s is not None and s.trace_id == parent.trace_id for s in sent)
    spans = {s.span_id for s in sent if s is not None}
    assert len(spans) == 2 and parent.span_id not in spans
    assert [r.headers["tracestate"] for r in server.requests] == ["k=v", "k=v"]
