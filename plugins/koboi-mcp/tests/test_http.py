"""Streamable HTTP: the SDK's high-level server on 127.0.0.1, behind the SSRF guard,
with a static bearer read from the environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koboi import KoboiAgent
from koboi.errors import KoboiError

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]

TOKEN = "mcp-test-token-" + "k" * 24

#: The notes server behind an ASGI gate that wants one bearer token (a server of this
#: kind checks tokens before anything reaches the MCP layer).
BEARER_SERVER = """
import sys, runpy
import uvicorn
notes = runpy.run_path(sys.argv[1])["server"]
app = notes.streamable_http_app()
token = sys.argv[3].encode()

async def gate(scope, receive, send):
    if scope["type"] == "http":
        headers = dict(scope.get("headers") or ())
        if headers.get(b"authorization") != b"Bearer " + token:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no"})
            return
    await app(scope, receive, send)

uvicorn.run(gate, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


@pytest.fixture
def bearer_notes(tmp_path: Path, kit: Any) -> Iterator[str]:
    port = kit.free_port()
    script = tmp_path / "bearer_server.py"
    script.write_text(BEARER_SERVER)
    process = subprocess.Popen(
        [sys.executable, str(script), str(kit.notes), str(port), TOKEN],
        env={**os.environ, "NOTES_FILE": str(tmp_path / "notes.json")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        kit.wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


async def test_an_http_server_on_loopback_needs_to_be_allowed(
    tmp_path: Path, kit: Any, http_notes: str
) -> None:
    guarded = {"transport": "http", "url": http_notes}
    config = kit.agent_config(tmp_path, {"notes": guarded})
    config["mcp"]["fail_fast"] = True
    with pytest.raises(KoboiError, match="loopback"):
        async with KoboiAgent.from_dict(config):
            pass
    # Control: explicitly allowed, the same server is reached and its tools work.
    allowed = kit.agent_config(
        tmp_path, {"notes": {"transport": "http", "url": http_notes, "allow_private": True}}
    )
    async with KoboiAgent.from_dict(allowed) as agent:
        listed = await agent.call_tool("notes__list_notes", {})
        read = await agent.call_tool("notes__read_resource", {"uri": "notes://all"})
    assert listed.ok and listed.content == "no notes"
    assert read.ok


async def test_a_bearer_from_the_environment_is_sent_and_never_shown(
    tmp_path: Path, kit: Any, bearer_notes: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = {
        "transport": "http",
        "url": bearer_notes,
        "allow_private": True,
        "auth": {"type": "bearer", "token_env": "NOTES_TOKEN"},
    }
    config = kit.agent_config(tmp_path, {"notes": server})
    config["mcp"]["fail_fast"] = True
    monkeypatch.setenv("NOTES_TOKEN", "wrong-" + "w" * 30)
    with pytest.raises(KoboiError, match=r"HTTP 401") as refused:
        async with KoboiAgent.from_dict(config):
            pass
    assert "wrong-" not in str(refused.value)
    monkeypatch.delenv("NOTES_TOKEN")
    with pytest.raises(KoboiError, match=r"NOTES_TOKEN .* is not set"):
        async with KoboiAgent.from_dict(config):
            pass
    # Control: the right token passes.
    monkeypatch.setenv("NOTES_TOKEN", TOKEN)
    async with KoboiAgent.from_dict(config) as agent:
        listed = await agent.call_tool("notes__list_notes", {})
        events = await agent.store.read(listed.session_id)
    assert listed.ok
    assert TOKEN not in repr([e.data for e in events])
