"""A run with skills replays byte-identical offline, with recorded tools (the default).

The list of skills is a pure function of the journaled ``skills.catalog``; the
bodies and files are tool results, served from the bundle.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from koboi import AllowAllApprover, KoboiAgent, PluginHost

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Kit = Any


async def test_a_run_with_skills_replays_identically(
    host: PluginHost, tmp_path: Path, kit: Kit
) -> None:
    from koboi_replay import bundle as B
    from koboi_replay.capture import capture_session
    from koboi_replay.replayer import replay_bundle

    kit.write_skill(
        tmp_path / "skills", "haiku", "Write haiku.", "Five, seven, five.\n", {"ref.md": "a"}
    )
    script = [
        {"tool_calls": [{"name": "skills__activate", "arguments": {"name": "haiku"}}]},
        {
            "tool_calls": [
                {"name": "skills__read_file", "arguments": {"skill": "haiku", "path": "ref.md"}}
            ]
        },
        {"reply": "An old silent pond"},
    ]
    config = tmp_path / "agent.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            agent: {{name: poet, stream: false}}
            llm: {{provider: scripted, on_exhausted: error, script: {json.dumps(script)}}}
            store: {{url: "memory://"}}
            skills: {{search_paths: [skills], examples: true}}
            """
        )
    )
    agent = KoboiAgent.from_config(config, host=host, approver=AllowAllApprover())
    async with agent:
        result = await agent.run("a poem please")
        captured = await capture_session(agent.store, "last", config_path=config, host=host)
    assert result.output == "An old silent pond"
    bundle = B.parse_bundle(captured.bundle.to_bytes())
    types = [e.type for e in bundle.events()]
    assert types.count("skills.loaded") == 2 and types.count("skills.catalog") == 1
    report = await replay_bundle(bundle, host=host, base_dir=tmp_path)
    assert report.identical, report.divergence
    assert report.tools == "recorded" and report.replayed_events == len(types)
    assert report.replayed_audit == report.expected_audit
