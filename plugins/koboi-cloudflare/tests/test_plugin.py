"""What the kernel sees: the entry point, the registration, and a whole agent run."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

import koboi_tools_basic.plugin
from koboi import KoboiAgent
from koboi.plugins import PluginHost
from koboi_cloudflare import plugin
from koboi_cloudflare.config import CloudflareOptions
from koboi_cloudflare.provider import CloudflareProvider
from koboi_testing.wire import Received, Reply, WireServer


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "cloudflare"]
    assert ep.value == "koboi_cloudflare.plugin"
    assert ep.dist is not None and ep.dist.name == "koboi-cloudflare"


@pytest.fixture
def host() -> PluginHost:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(plugin, "cloudflare", dist="koboi-cloudflare")
    host.add_plugin(koboi_tools_basic.plugin, "tools-basic", dist="koboi-tools-basic")
    return host


@pytest.mark.anyio
async def test_registers_the_provider_factory(host: PluginHost, cf: Any) -> None:
    entry = host.catalog().providers.get("cloudflare")
    assert entry is not None
    assert entry.options is CloudflareOptions
    assert entry.plugin == "cloudflare"
    options = CloudflareOptions(model=cf.model, api_key=cf.token, account_id=cf.account)
    provider = entry.target(options)
    try:
        assert isinstance(provider, CloudflareProvider)
        assert (provider.name, provider.model) == ("cloudflare", cf.model)
    finally:
        await provider.aclose()


def test_loading_the_plugin_imports_neither_httpx_nor_the_provider() -> None:
    code = (
        "import sys, koboi_cloudflare.plugin; "
        "print('httpx' in sys.modules, 'koboi_cloudflare.provider' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.split() == ["False", "False"]


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_an_agent_run_with_a_calculator_call(
    host: PluginHost,
    server: WireServer,
    cf: Any,
    clean_env: pytest.MonkeyPatch,
    tmp_path: Path,
    stream: bool,
) -> None:
    def handler(request: Received) -> Reply:
        body = request.json()
        tool_results = [m for m in body["messages"] if m["role"] == "tool"]
        if not tool_results:
            call = {"name": "calculator", "arguments": {"expression": "6 * 7"}}
            if body["stream"]:
                return cf.sse(
                    [{"response": "", "tool_calls": [call]}, {"response": "", "usage": {}}]
                )
            return cf.ok({"response": "", "tool_calls": [call]})
        answer = f"6 * 7 = {tool_results[-1]['content']}"
        if body["stream"]:
            return cf.sse([{"response": answer[:4]}, {"response": answer[4:]}])
        return cf.ok({"response": answer})

    server.handler = handler
    clean_env.chdir(tmp_path)
    clean_env.setenv("CLOUDFLARE_API_TOKEN", cf.token)
    clean_env.setenv("CLOUDFLARE_ACCOUNT_ID", cf.account)
    config = {
        "agent": {"system_prompt": "Use the calculator.", "stream": stream},
        "llm": {
            "provider": "cloudflare",
            "model": cf.model,
            "base_url": server.url + "/client/v4",
            "max_retries": 0,
        },
        "tools": {"builtin": ["calculator"]},
        "store": {"url": "memory://"},
    }
    async with KoboiAgent.from_dict(config, host=host, base_dir=tmp_path) as agent:
        result = await agent.run("What is 6 * 7?")
    assert (result.outcome, result.output, result.steps) == ("completed", "6 * 7 = 42", 2)
    assert result.usage.requests == 2

    first, second = (r.json() for r in server.requests)
    assert all(r.path == cf.path for r in server.requests)
    assert [t["name"] for t in first["tools"]] == ["calculator"]
    assert first["messages"] == [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": "What is 6 * 7?"},
    ]
    assistant, tool = second["messages"][2:]
    (call,) = assistant["tool_calls"]
    assert call["function"] == {
        "name": "calculator",
        "arguments": json.dumps({"expression": "6 * 7"}, separators=(",", ":")),
    }
    assert tool == {
        "role": "tool",
        "tool_call_id": call["id"],
        "name": "calculator",
        "content": "42",
    }
