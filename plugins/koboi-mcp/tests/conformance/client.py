"""koboi's MCP client under the official conformance suite: ``client.py SERVER_URL``.

The suite starts a test server per scenario (``MCP_CONFORMANCE_SCENARIO``) and runs
this with its URL. What runs is koboi's own path, as an agent would use it: a
config with one ``mcp`` server, an agent opened on it (the toolset connects and
lists the tools), and governed direct calls (``agent.call_tool``) for what the
scenario asks. The OAuth scenarios log in first with ``koboi mcp login``'s code,
the browser replaced by a request that follows the authorization server's redirect
(its test server approves at once) to koboi's callback server.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

import anyio
import httpx2

from koboi.agent import KoboiAgent
from koboi.approval import AllowAllApprover
from koboi.store import InMemoryStore
from koboi.toolsets import ToolsetTool
from koboi_mcp.auth import login
from koboi_mcp.config import ServerSettings
from koboi_mcp.transport import tls_context


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _follow(url: str) -> None:
    """The person's browser: the test authorization server redirects to the callback."""
    transport = httpx2.AsyncHTTPTransport(verify=tls_context())
    async with httpx2.AsyncClient(transport=transport, follow_redirects=True, timeout=30) as client:
        await client.get(url)


def _auth(scenario: str, context: dict[str, Any]) -> dict[str, Any]:
    if not scenario.startswith("auth/"):
        return {"type": "none"}
    if "client_id" in context and "client_secret" in context and "credentials" in scenario:
        return {
            "type": "client_credentials",
            "client_id": context["client_id"],
            "client_secret": context["client_secret"],
        }
    registered = {
        k: context[k] for k in ("client_id", "client_secret") if context.get(k) is not None
    }
    return {"type": "authorization_code", "redirect_port": _free_port(), **registered}


async def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    server = {
        "transport": "http",
        "url": url,
        "allow_private": True,  # the suite's servers are on 127.0.0.1
        "auth": _auth(scenario, context),
        "elicitation": "suspend",
    }
    store = InMemoryStore()
    await store.open()
    if server["auth"]["type"] != "none":
        # As 'koboi mcp login server' would, once, before the agent runs.
        await login("server", ServerSettings.model_validate(server), store, open_url=_follow)
    config = {
        "agent": {"name": "conformance-client", "mode": "act"},
        "llm": {"provider": "scripted", "script": ["done"]},
        "store": {"url": "memory://"},
        "mcp": {"servers": {"server": server}, "fail_fast": True},
    }
    agent = KoboiAgent.from_dict(config, store=store, approver=AllowAllApprover())
    async with agent:
        # The server's tools by their own names (the agent offers them as server__<name>).
        offered_as = {
            tool.original.name: name
            for name, tool in agent.tools.items()
            if isinstance(tool, ToolsetTool)
        }
        tools = {own: agent.tools[name] for own, name in offered_as.items()}
        # The calls the scenario names (with their arguments), else a sensible call of
        # every tool the server offers.
        calls: list[tuple[str, dict[str, Any]]] = [
            (str(c["name"]), dict(c.get("arguments") or {})) for c in context.get("toolCalls", ())
        ]
        if not calls:
            for name in tools:
                if name == "add_numbers":
                    calls.append((name, {"a": 5, "b": 3}))
                elif name == "json_schema_echo" and "json_schema_2020_12_tool" in tools:
                    # What koboi offers the model is the server's schema, verbatim.
                    offered = tools["json_schema_2020_12_tool"].spec().parameters
                    calls.append((name, {"schema": offered}))
                elif name != "json_schema_2020_12_tool":
                    calls.append((name, {}))
        for name, arguments in calls:
            if name not in tools:
                continue
            called = await agent.call_tool(offered_as[name], arguments)
            if called.outcome == "suspended":
                # An elicitation: answered as a person who accepts the form's defaults.
                result = await agent.resume_run(called.session_id, reply={})
                print(f"{name}: {result.outcome} {result.output[:200]}")
            else:
                print(f"{name}: {called.outcome} {called.content[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[-1]))
