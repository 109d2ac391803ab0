"""Runs that used a toolset's tools replay offline, without the toolset.

A toolset's tools (an MCP server's, a peer's) exist only while it is connected.
The journal defines every one a run offers, so under ``--tools recorded`` the
replay offers them from the bundle and never builds the plugin's toolset: here the
replaying host's toolset factory fails if it is called at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from koboi import hookimpl
from koboi.agent import KoboiAgent
from koboi.approval import AllowAllApprover
from koboi.plugins import PluginHost
from koboi.tools import Tool, tool
from koboi.toolsets import Toolset
from koboi_replay import bundle as B
from koboi_replay.capture import capture_session
from koboi_replay.replayer import replay_bundle

pytestmark = pytest.mark.anyio

CONFIG = """
agent: {name: remote-tools, mode: act}
llm:
  provider: scripted
  on_exhausted: error
  script:
    - tool_calls: [{name: remote__grow, arguments: {}}]
    - tool_calls: [{name: remote__late, arguments: {word: hi}}]
    - reply: "Done."
store: {url: "memory://"}
"""


class Remote(Toolset):
    """Stands for a server's tools: one of them makes another appear."""

    name = "remote"

    def __init__(self) -> None:
        @tool(name="grow", risk="moderate", thread=False)
        def grow() -> str:
            """Make late appear (offered as remote__late)."""
            self.offered.append(late)
            self.version += 1
            return "grown"

        @tool(name="late", risk="safe", idempotent=True, thread=False)
        def late(word: str) -> str:
            """Shout a word.

            Args:
                word: The word.
            """
            return word.upper()

        self.offered: list[Tool] = [grow]

    def tools(self) -> Sequence[Tool]:
        return list(self.offered)


def host_with_toolset(*, broken: bool) -> PluginHost:
    def factory(config: Any) -> Toolset:
        if broken:
            raise AssertionError("the replay built the plugin's toolset")
        return Remote()

    class Plugin:
        @hookimpl
        def koboi_register_toolsets(self, register: Any) -> None:
            register("remote", factory)

    host = PluginHost(strict=True)
    host.load()
    host.add_plugin(Plugin(), "remote")
    return host


async def test_a_run_with_toolset_tools_replays_without_the_toolset(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(CONFIG)
    host = host_with_toolset(broken=False)
    agent = KoboiAgent.from_config(config, host=host, approver=AllowAllApprover())
    async with agent:
        result = await agent.run("go")
        # A direct call in the same session, to a tool that appeared mid-run.
        direct = await agent.call_tool("remote__late", {"word": "yo"}, session_id=result.session_id)
        assert result.outcome == "completed" and direct.ok and direct.content == "YO"
        captured = await capture_session(agent.store, "last", config_path=config, host=host)
    bundle = B.parse_bundle(captured.bundle.to_bytes())
    types = [e.type for e in bundle.events()]
    assert "tools_changed" in types
    results = [e.data["content"] for e in bundle.events() if e.type == "tool_call_finished"]
    assert results[:2] == ["grown", "HI"], results  # the namespaced names were found

    report = await replay_bundle(bundle, host=host_with_toolset(broken=True), base_dir=tmp_path)
    assert report.identical, report.divergence
    assert report.replayed_events == len(bundle.events())


async def test_without_definitions_the_replay_says_where_it_diverged(tmp_path: Path) -> None:
    """A recording that does not define its toolset tools (made before the journal did)
    diverges at the first place they are offered, and says so; nothing hangs."""
    config = tmp_path / "agent.yaml"
    config.write_text(CONFIG)
    host = host_with_toolset(broken=False)
    agent = KoboiAgent.from_config(config, host=host, approver=AllowAllApprover())
    async with agent:
        await agent.run("go")
        captured = await capture_session(agent.store, "last", config_path=config, host=host)
    bundle = B.parse_bundle(captured.bundle.to_bytes())
    first = bundle.events()[0]
    assert "toolset_tools" in first.data
    stripped = {k: v for k, v in first.data.items() if k != "toolset_tools"}
    lines = B.parse_bundle(bundle.to_bytes())
    records = [
        {**r, "data": stripped} if r.get("seq") == first.seq else r for r in lines.records(B.EVENTS)
    ]
    lines.files[B.EVENTS] = B.jsonl(records)
    lines.seal()
    report = await replay_bundle(
        B.parse_bundle(lines.to_bytes()), host=host_with_toolset(broken=True), base_dir=tmp_path
    )
    assert not report.identical
    assert report.divergence is not None and report.divergence.index == first.seq
