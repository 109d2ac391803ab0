"""Interop with the reference "everything" MCP server (npm: @modelcontextprotocol/server-everything),
a TypeScript server nobody here wrote, on Node 22 — over stdio and streamable HTTP.

``.ci/run`` installs both (pinned, in ``.ci/node_modules``); without them the tests
skip, and fail when ``CI`` is set.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koboi import KoboiAgent
from koboi.approval import AllowAllApprover
from koboi.events import FinalEvent, PluginEvent

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def everything(kit: Any) -> dict[str, Any]:
    kit.require(kit.node.exists() and kit.everything.exists(), "Node 22 and server-everything")
    return {"command": str(kit.node), "args": [str(kit.everything), "stdio"]}


@pytest.fixture
def everything_http(kit: Any) -> Iterator[str]:
    kit.require(kit.node.exists() and kit.everything.exists(), "Node 22 and server-everything")
    port = kit.free_port()
    process = subprocess.Popen(
        [str(kit.node), str(kit.everything), "streamableHttp"],
        env={"PATH": os.environ["PATH"], "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        kit.wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def _tool(agent: KoboiAgent, remote: str) -> str:
    return next(name for name in agent.tools if name == f"ev__{remote}")


async def test_everything_over_stdio(tmp_path: Path, kit: Any, everything: dict[str, Any]) -> None:
    script = [
        {
            "tool_calls": [
                {
                    "name": "ev__trigger-long-running-operation",
                    "arguments": {"duration": 1, "steps": 3},
                }
            ]
        },
        "done",
    ]
    config = kit.agent_config(tmp_path, {"ev": everything}, script=script)
    async with KoboiAgent.from_dict(config, approver=AllowAllApprover()) as agent:
        tools = agent.tools
        echoed = await agent.call_tool(_tool(agent, "echo"), {"message": "hello"})
        summed = await agent.call_tool(_tool(agent, "get-sum"), {"a": 2, "b": 3})
        image = await agent.call_tool(_tool(agent, "get-tiny-image"), {})
        resources = await agent.call_tool("ev__list_resources", {})
        first = resources.content.split()[0]
        read = await agent.call_tool("ev__read_resource", {"uri": first})
        prompt = await agent.call_tool("ev__get_prompt", {"name": "simple-prompt"})
        bad = await agent.call_tool(_tool(agent, "get-sum"), {"a": "two"})
        progress: list[PluginEvent] = []
        async for event in agent.stream("run long"):
            if isinstance(event, PluginEvent) and event.type == "mcp.progress":
                progress.append(event)
            elif isinstance(event, FinalEvent):
                assert event.result.outcome == "completed"
    # Risk from a third party's annotations: its read-only tools are safe, its others not.
    assert tools["ev__echo"].risk.value == "safe"
    assert tools["ev__trigger-elicitation-request"].risk.value == "moderate"
    assert echoed.ok and echoed.content == "Echo: hello"
    assert summed.ok and "5" in summed.content
    assert image.ok and "[image: image/png" in image.content
    assert resources.ok and first.startswith("demo://")
    assert read.ok and read.content.startswith(f"[resource {first}")
    assert prompt.ok and prompt.content.startswith("user:")
    assert bad.is_error  # the server refused the arguments; koboi passed its answer on
    assert [e.data["progress"] for e in progress] == [1, 2, 3]


async def test_everything_elicitation_suspends_and_the_reply_answers(
    tmp_path: Path, kit: Any, everything: dict[str, Any]
) -> None:
    config = kit.agent_config(
        tmp_path, {"ev": everything}, store=f"sqlite:///{tmp_path / 'koboi.db'}"
    )
    async with KoboiAgent.from_dict(config, approver=AllowAllApprover()) as agent:
        asked = await agent.call_tool(_tool(agent, "trigger-elicitation-request"), {})
        assert asked.outcome == "suspended"
        assert asked.result is not None and asked.result.suspension is not None
        data = asked.result.suspension["data"]
        assert data["mcp_server"] == "ev" and data["requested_schema"]["properties"]
        answered = await agent.resume_run(asked.session_id, reply={"name": "Ada"})
    assert answered.outcome == "completed", answered.error
    assert "Ada" in answered.output


async def test_everything_over_http(tmp_path: Path, kit: Any, everything_http: str) -> None:
    server = {"transport": "http", "url": everything_http, "allow_private": True}
    async with KoboiAgent.from_dict(kit.agent_config(tmp_path, {"ev": server})) as agent:
        echoed = await agent.call_tool(_tool(agent, "echo"), {"message": "over http"})
        summed = await agent.call_tool(_tool(agent, "get-sum"), {"a": 20, "b": 22})
    assert echoed.ok and echoed.content == "Echo: over http"
    assert summed.ok and "42" in summed.content


async def test_everythings_environment_holds_no_secret_of_koboi(
    tmp_path: Path, kit: Any, everything: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "z" * 40)
    async with KoboiAgent.from_dict(kit.agent_config(tmp_path, {"ev": everything})) as agent:
        shown = await agent.call_tool(_tool(agent, "get-env"), {})
    assert shown.ok and "PATH" in shown.content
    assert "OPENAI_API_KEY" not in shown.content and "sk-zzzz" not in shown.content
