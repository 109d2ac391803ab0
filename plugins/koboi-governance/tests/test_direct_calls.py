"""Governed direct tool calls (``agent.call_tool``) under koboi-governance: what exposes tools
to the outside (an MCP server, an HTTP route, a peer) goes through the whole pipeline. Each
refusal has its control, the same path going through when allowed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from koboi import AllowAllApprover, KoboiAgent, Toolset
from koboi.agent import ToolCallResult
from koboi.tools import Tool

pytestmark = pytest.mark.anyio


async def _call(
    agent: KoboiAgent, name: str, arguments: dict[str, Any], **kwargs: Any
) -> tuple[ToolCallResult, list[Any]]:
    async with agent:
        called = await agent.call_tool(name, arguments, **kwargs)
        return called, list(await agent.store.read(called.session_id))


def _refused(events: list[Any]) -> list[str]:
    return [e.data["stage"] for e in events if e.type == "tool_call_refused"]


async def test_chat_and_plan_modes_refuse_a_direct_write(make_agent: Any) -> None:
    for mode in ("chat", "plan"):
        called, events = await _call(
            make_agent([], mode=mode), "note", {"text": "x"}, approver=AllowAllApprover()
        )
        assert (called.outcome, called.refused_by) == ("refused", "mode"), mode
        assert "agent.mode is" in called.content and not called.ok
        assert _refused(events) == ["mode"]
        # Journaled as a direct call: a run of its own, kind tool_call.
        assert events[0].data["kind"] == "tool_call"
    # Control: a read goes through in chat mode, and the write in act mode with a yes.
    read, _ = await _call(make_agent([], mode="chat"), "look", {"what": "x"})
    assert read.ok and read.content == "looked at x"
    write, events = await _call(
        make_agent([], mode="act"), "note", {"text": "x"}, approver=AllowAllApprover()
    )
    assert write.ok and write.content == "noted x"
    assert [e.type for e in events if e.type.startswith("approval_")] == [
        "approval_requested",
        "approval_decided",
    ]


async def test_a_direct_call_without_an_approver_is_denied_by_default(make_agent: Any) -> None:
    called, _ = await _call(make_agent([]), "note", {"text": "x"})
    assert (called.outcome, called.refused_by) == ("refused", "approval")
    # Control: the approver the caller gives decides.
    called, _ = await _call(make_agent([]), "note", {"text": "x"}, approver=AllowAllApprover())
    assert called.ok


async def test_a_policy_deny_refuses_a_direct_call_and_is_audited(make_agent: Any) -> None:
    governance = {
        "policy": {"rules": [{"tool": "note", "args": {"text": "secret plan"}, "action": "deny"}]}
    }
    async with make_agent([], governance=governance) as agent:
        called = await agent.call_tool("note", {"text": "secret plan"}, approver=AllowAllApprover())
        events = list(await agent.store.read(called.session_id))
        audit = [a.data for a in await agent.store.read_audit(called.session_id)]
        # Control: other arguments are not denied (and are audited as they run).
        allowed = await agent.call_tool("note", {"text": "groceries"}, approver=AllowAllApprover())
        allowed_audit = [a.data for a in await agent.store.read_audit(allowed.session_id)]
    assert (called.outcome, called.refused_by) == ("refused", "policy")
    assert _refused(events) == ["policy"]
    (decision,) = [a for a in audit if a.get("phase") == "decision"]
    assert (decision["decision"], decision["stage"], decision["tool"]) == ("deny", "policy", "note")
    assert allowed.ok and allowed.content == "noted groceries"
    assert [a.get("phase") for a in allowed_audit if a.get("action") == "tool_call"][-2:] == [
        "before",
        "after",
    ]


async def test_an_argument_guardrail_refuses_a_direct_call(make_agent: Any) -> None:
    governance = {"guardrails": {"input": {"deny_patterns": [r"rm\s+-rf"]}}}
    called, events = await _call(
        make_agent([], governance=governance), "look", {"what": "rm -rf /"}
    )
    assert (called.outcome, called.refused_by) == ("refused", "guardrails")
    assert "deny_patterns" in called.content
    assert _refused(events) == ["guardrails"]
    # Control: harmless arguments go through.
    called, _ = await _call(make_agent([], governance=governance), "look", {"what": "ls"})
    assert called.ok and called.content == "looked at ls"


async def test_a_rate_limit_counts_direct_calls(make_agent: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'koboi.db'}"
    governance = {"rate_limits": {"look": {"per_session": 1}}}
    agent = make_agent([], governance=governance, store_url=url)
    async with agent:
        first = await agent.call_tool("look", {"what": "1"}, session_id="s1")
        second = await agent.call_tool("look", {"what": "2"}, session_id="s1")
        # Control: another session has its own allowance.
        other = await agent.call_tool("look", {"what": "3"}, session_id="s2")
    assert first.ok and other.ok
    assert (second.outcome, second.refused_by) == ("refused", "rate_limit")
    assert "governance.rate_limits.look.per_session" in second.content


class Arriving(Toolset):
    """A toolset whose destructive tool arrives after the agent opened (an MCP server
    announcing a new tool): the check made at open never saw it."""

    name = "late"

    def __init__(self, tool: Tool) -> None:
        self.tool = tool
        self.offered: list[Tool] = []

    def tools(self) -> Sequence[Tool]:
        return list(self.offered)

    def arrive(self) -> None:
        self.offered = [self.tool]
        self.version += 1


async def test_an_unattended_direct_call_of_a_destructive_tool_needs_an_isolating_sandbox(
    make_agent: Any, demo_tools: dict[str, Tool], tmp_path: Path
) -> None:
    async def wipe_directly(extra: dict[str, Any]) -> tuple[ToolCallResult, list[Any]]:
        arriving = Arriving(demo_tools["wipe"])
        agent = make_agent(
            [],
            mode="yolo",
            autonomous=True,
            tools=[demo_tools["look"]],
            toolsets=[arriving],
            extra=extra,
        )
        async with agent:
            arriving.arrive()
            called = await agent.call_tool("late__wipe", {"target": "x"})
            return called, list(await agent.store.read(called.session_id))

    called, events = await wipe_directly({})
    assert (called.outcome, called.refused_by) == ("refused", "sandbox")
    assert "need an isolating sandbox" in called.content
    assert _refused(events) == ["sandbox"]
    assert not [e for e in events if e.type == "tool_call_started"]
    # Control: inside the restricted sandbox the same unattended call runs.
    (tmp_path / "w").mkdir()
    restricted = {"sandbox": {"backend": "restricted", "workdir": str(tmp_path / "w")}}
    called, events = await wipe_directly(restricted)
    assert called.ok and called.content == "wiped x"
    assert [e.type for e in events].count("tool_call_finished") == 1
