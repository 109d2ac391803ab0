"""``koboi mcp-serve``: an agent's tools to MCP clients, never around its governance.

The clients here are the MCP SDK's own ``Client`` (software nobody here wrote)
on both protocol eras, and koboi's own MCP client; the server is the real
``koboi mcp-serve`` command in a process of its own (stdio, or HTTP on 127.0.0.1
with the store's API keys). What a call did is read from the served agent's
journal and from the file its tool writes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[3]


def _config(tmp_path: Path, *, policy: list[dict[str, Any]] | None = None) -> Path:
    """The served agent: a safe calculator and clock, a moderate append_log that writes a
    file; a deny rule when asked; a SQLite store the test reads back."""
    config: dict[str, Any] = {
        "agent": {"name": "served", "mode": "act"},
        "llm": {
            "provider": "scripted",
            "rules": [
                {
                    "match": r"(?P<expr>\d+ [*+] \d+)",
                    "tool": "calculator",
                    "arguments": {"expression": "{expr}"},
                    "reply": "{expr} = {result}",
                }
            ],
        },
        "tools": {"builtin": ["calculator", "current_time", "append_log"]},
        "sandbox": {"backend": "passthrough", "workdir": str(tmp_path / "work")},
        "store": {"url": f"sqlite:///{tmp_path / 'koboi.db'}"},
    }
    if policy is not None:
        config["governance"] = {"policy": {"rules": policy}}
    (tmp_path / "work").mkdir(exist_ok=True)
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _stdio(config: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "koboi_cli", "mcp-serve", str(config), *args],
        env={"PATH": os.environ["PATH"], "KOBOI_STRICT_PLUGINS": "1"},
        cwd=str(config.parent),
    )


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def _journal(config: Path) -> list[dict[str, Any]]:
    """Every event of every session of the served agent's store, read back."""
    from koboi.agent import KoboiAgent

    events: list[dict[str, Any]] = []
    async with KoboiAgent.from_config(config) as agent:
        for session in reversed(await agent.store.list_sessions()):
            events += [{"type": e.type, "data": e.data} for e in await agent.store.read(session.id)]
    return events


async def test_only_safe_tools_are_exposed_unless_allowed(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with Client(_stdio(config)) as client:
        names = sorted(t.name for t in (await client.list_tools()).tools)
        result = await client.call_tool("calculator", {"expression": "6 * 7"})
        hidden = await client.call_tool("append_log", {"line": "x"})
    assert names == ["calculator", "current_time"]
    assert not result.is_error and _text(result) == "42"
    assert hidden.is_error and "not exposed" in _text(hidden)
    assert not (tmp_path / "work" / "crash_demo.log").exists()
    # Widened: exposed (annotated moderate), and still governed: it needs approval, and a
    # client that cannot answer an elicitation cannot give one (denied by default).
    async with Client(_stdio(config, "--allow", "append_log")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        unapproved = await client.call_tool("append_log", {"line": "unapproved"})
    assert "append_log" in tools
    annotations = tools["append_log"].annotations
    assert annotations is not None and annotations.read_only_hint is False
    assert tools["calculator"].annotations is not None
    assert tools["calculator"].annotations.read_only_hint is True
    assert unapproved.is_error and "refused (approval)" in _text(unapproved)
    assert "cannot give one" in _text(unapproved)
    assert not (tmp_path / "work" / "crash_demo.log").exists()


async def test_a_tool_the_policy_denies_cannot_be_called_over_mcp(tmp_path: Path) -> None:
    config = _config(
        tmp_path, policy=[{"tool": "current_time", "action": "deny", "reason": "no clocks"}]
    )
    async with Client(_stdio(config)) as client:
        denied = await client.call_tool("current_time", {})
        allowed = await client.call_tool("calculator", {"expression": "2 + 2"})  # control
    assert denied.is_error and "refused (policy)" in _text(denied) and "no clocks" in _text(denied)
    assert not allowed.is_error and _text(allowed) == "4"
    events = await _journal(config)
    refused = [e for e in events if e["type"] == "tool_call_refused"]
    assert [(e["data"]["name"], e["data"]["stage"]) for e in refused] == [
        ("current_time", "policy")
    ]
    assert any(
        e["type"] == "tool_call_finished" and e["data"]["name"] == "calculator" for e in events
    )


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025-11-25", "2026-07-28"])
async def test_a_client_approves_by_elicitation_on_both_protocol_eras(
    tmp_path: Path, mode: str
) -> None:
    config = _config(tmp_path)
    asked: list[str] = []

    def answering(approve: bool) -> Any:
        async def elicit(
            context: ClientRequestContext, params: types.ElicitRequestParams
        ) -> types.ElicitResult:
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"approve": approve})

        return elicit

    async with Client(
        _stdio(config, "--allow", "append_log"), mode=mode, elicitation_callback=answering(False)
    ) as client:
        refused = await client.call_tool("append_log", {"line": "declined"})
    assert refused.is_error and "not approved" in _text(refused)
    assert not (tmp_path / "work" / "crash_demo.log").exists()
    async with Client(
        _stdio(config, "--allow", "append_log"), mode=mode, elicitation_callback=answering(True)
    ) as client:
        ran = await client.call_tool("append_log", {"line": "approved"})
    assert not ran.is_error and _text(ran) == "appended approved"
    assert (tmp_path / "work" / "crash_demo.log").read_text() == "approved\n"
    assert len(asked) == 2 and "append_log" in asked[0] and "moderate" in asked[0]
    decided = [e["data"] for e in await _journal(config) if e["type"] == "approval_decided"]
    assert any(d["approved"] and d["decided_by"] == "mcp-client" for d in decided)


async def test_koboi_through_koboi_keeps_both_governances(tmp_path: Path) -> None:
    """An agent whose MCP server is another agent's mcp-serve: the outer agent's approval
    comes first, the served agent's pipeline still applies."""
    from koboi import KoboiAgent
    from koboi.approval import AllowAllApprover

    served = _config(tmp_path)
    outer = {
        "agent": {"name": "outer", "mode": "act"},
        "llm": {"provider": "scripted", "script": ["done"]},
        "store": {"url": "memory://"},
        "mcp": {
            "servers": {
                "inner": {
                    "command": sys.executable,
                    "args": ["-m", "koboi_cli", "mcp-serve", str(served), "--ask-agent"],
                    "cwd": str(tmp_path),
                }
            }
        },
    }
    async with KoboiAgent.from_dict(outer) as agent:
        assert sorted(agent.tools) == [
            "inner__ask_served",
            "inner__calculator",
            "inner__current_time",
        ]
        sum_ = await agent.call_tool("inner__calculator", {"expression": "20 + 22"})
        refused = await agent.call_tool("inner__ask_served", {"message": "what is 2 + 3"})
    assert sum_.ok and sum_.content == "42"
    assert refused.refused_by == "approval"  # moderate on the outer agent: nobody approved
    async with KoboiAgent.from_dict(outer, approver=AllowAllApprover()) as agent:
        asked = await agent.call_tool("inner__ask_served", {"message": "what is 2 + 3"})
    assert asked.ok and asked.content == "2 + 3 = 5"
    runs = [e for e in await _journal(served) if e["type"] == "run_started" and e["data"]["input"]]
    assert [r["data"]["input"] for r in runs] == ["what is 2 + 3"]


# -- HTTP, with the store's API keys -------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def served_http(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``koboi mcp-serve --http`` with one API key: (URL, key)."""
    config = _config(tmp_path)
    env = {**os.environ, "KOBOI_STRICT_PLUGINS": "1"}
    created = subprocess.run(
        [
            sys.executable,
            "-m",
            "koboi_cli",
            "keys",
            "create",
            "--config",
            str(config),
            "--principal",
            "alice",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)["key"]
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "koboi_cli",
            "mcp-serve",
            str(config),
            "--http",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "koboi mcp-serve exited"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", key
    finally:
        process.kill()
        process.wait()


async def test_http_needs_an_api_key_and_its_principal_owns_the_calls(
    tmp_path: Path, served_http: tuple[str, str]
) -> None:
    url, key = served_http
    async with httpx2.AsyncClient() as http:
        anonymous = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        forged = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Authorization": "Bearer koboi_0123456789abcdef_" + "x" * 43},
        )
    assert anonymous.status_code == 401 and forged.status_code == 401
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool("calculator", {"expression": "6 * 7"})
    assert not result.is_error and _text(result) == "42"
    from koboi.agent import KoboiAgent

    async with KoboiAgent.from_config(tmp_path / "agent.yaml") as agent:
        sessions = await agent.store.list_sessions()
    assert [s.owner for s in sessions] == ["alice"]
