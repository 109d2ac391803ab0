"""A captured run that used MCP tools replays offline with no MCP server at all.

Recorded against the SDK-written notes server over stdio (calls, a tool list that
changed mid-run, a direct call); replayed after the server's program is gone, with
the ``mcp`` section still in the config: nothing is started, the journal is the
same byte for byte.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from koboi import journal as J
from koboi.agent import KoboiAgent
from koboi.approval import AllowAllApprover
from koboi.plugins import default_host
from koboi_replay import bundle as B
from koboi_replay.capture import capture_session
from koboi_replay.replayer import replay_bundle

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]


async def test_a_run_with_mcp_tools_replays_with_no_mcp_server(tmp_path: Path, kit: Any) -> None:
    server_copy = tmp_path / "notes_server.py"
    shutil.copy(kit.notes, server_copy)
    server = kit.notes_server(tmp_path, args=[str(server_copy)])
    script = [
        {"tool_calls": [{"name": "notes__add_note", "arguments": {"text": "milk"}}]},
        {"tool_calls": [{"name": "notes__enable_shout", "arguments": {}}]},
        {"tool_calls": [{"name": "notes__shout", "arguments": {"text": "milk"}}]},
        "Noted, and shouted.",
    ]
    config = tmp_path / "agent.yaml"
    config.write_text(yaml.safe_dump(kit.agent_config(tmp_path, {"notes": server}, script=script)))
    host = default_host()
    async with KoboiAgent.from_config(config, host=host, approver=AllowAllApprover()) as agent:
        result = await agent.run("note milk and shout it")
        direct = await agent.call_tool("notes__list_notes", {}, session_id=result.session_id)
        assert result.outcome == "completed" and direct.ok
        captured = await capture_session(agent.store, "last", config_path=config, host=host)
    bundle = B.parse_bundle(captured.bundle.to_bytes())
    assert J.TOOLS_CHANGED in [e.type for e in bundle.events()]
    ran = kit.calls(tmp_path)

    server_copy.unlink()  # no server to start: a replay that tried would fail to
    report = await replay_bundle(bundle, host=host, base_dir=tmp_path)
    assert report.identical, report.divergence
    assert report.replayed_events == len(bundle.events())
    assert kit.calls(tmp_path) == ran  # nothing ran again
