"""A run with command hooks replays byte-identical, offline.

What each hook decided is journaled (``hooks.ran``, with the context it added
and the arguments it rewrote), so a replay compares it like any event. A
command hook is a process: the replay runs the hooks again with ``--tools
live`` (offline, in the config's sandbox) and must come out identical. Under
``--tools recorded`` no process runs at all, so the replay stops at the first
hook, saying so: that is the documented rule, checked here too.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from koboi import AllowAllApprover, KoboiAgent, PluginHost

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Ran = Any
Kit = Any


def _config(tmp_path: Path, kit: Kit) -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    script = [
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "/tmp/x.txt", "content": "hi"}}
            ]
        },
        {"reply": "first"},
        {"reply": "second"},
    ]
    hooks = {
        "user_prompt": [{"command": kit.script("prompt_context.sh")}],
        "before_tool_call": [{"matcher": "write_file", "command": kit.script("rewrite_path.py")}],
        "before_finish": [{"command": kit.script("stop_once.py")}],
        "run_end": [{"command": ["/bin/sh", "-c", "cat >/dev/null"]}],
    }
    text = f"""
        agent: {{name: hooked, stream: false}}
        llm: {{provider: scripted, on_exhausted: error, script: {json.dumps(script)}}}
        sandbox: {{backend: passthrough, workdir: {json.dumps(str(work))}}}
        store: {{url: "memory://"}}
        hooks: {json.dumps(hooks)}
    """
    path = tmp_path / "agent.yaml"
    path.write_text(textwrap.dedent(text))
    return path


async def test_a_run_with_hooks_replays_identically_with_live_tools(
    host: PluginHost, ran: Ran, tmp_path: Path, kit: Kit
) -> None:
    from koboi_replay import bundle as B
    from koboi_replay.capture import capture_session
    from koboi_replay.replayer import replay_bundle

    config = _config(tmp_path, kit)
    tools = kit.tools_for(ran)
    agent = KoboiAgent.from_config(
        config, host=host, approver=AllowAllApprover(), extra_tools=tools
    )
    async with agent:
        result = await agent.run("write a note")
        captured = await capture_session(agent.store, "last", config_path=config, host=host)
    assert result.output == "second" and ran.writes == [("notes/x.txt", "hi")]
    bundle = B.parse_bundle(captured.bundle.to_bytes())
    types = [e.type for e in bundle.events()]
    assert types.count("hooks.ran") == 5 and "context_added" in types

    report = await replay_bundle(
        bundle, tools="live", host=host, extra_tools=tools, base_dir=tmp_path
    )
    assert report.identical, report.divergence
    assert report.replayed_events == report.expected_events == len(types)
    assert report.replayed_audit == report.expected_audit

    recorded = await replay_bundle(bundle, tools="recorded", host=host, extra_tools=tools)
    assert not recorded.identical and recorded.divergence is not None
    assert "no process runs under --tools recorded" in json.dumps(recorded.divergence.actual)
