"""Sub-agents as tools: run_subagent, ask__<agent> and agent_tool()."""

from __future__ import annotations

import pytest
from orchestration_kit import agent_def, config, finals, make, run_all

from koboi import ChildEvent, FinalEvent, ToolCallEvent, ToolResultEvent
from koboi.subagents import child_session_id
from koboi_orchestration import agent_tool

pytestmark = pytest.mark.anyio


def delegating(tool: str, arguments: dict[str, str]) -> dict[str, object]:
    data = config(
        [
            agent_def(
                "researcher",
                "tides follow the moon",
                description="finds facts",
                system_prompt="You find facts.",
                as_tool=True,
            ),
            agent_def("critic", "looks fine", description="reviews"),
        ],
        tools=["run_subagent"],
        runner="loop",
    )
    data["llm"] = {
        "provider": "scripted",
        "script": [
            {"tool_calls": [{"name": tool, "arguments": arguments, "id": "ask1"}]},
            "The researcher says: {result}",
        ],
    }
    return data


async def test_run_subagent_runs_a_configured_agent_and_streams_its_events() -> None:
    data = delegating("run_subagent", {"agent": "researcher", "task": "why tides?"})
    async with make(data) as agent:
        result, events = await run_all(agent)
        child = await agent.store.get_session(child_session_id("root", "1:call:1:ask1"))
        child_events = await agent.store.read(child.id)
    assert result.outcome == "completed", result.error
    tool_result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert tool_result.content == "tides follow the moon"
    children = [e for e in events if isinstance(e, ChildEvent)]
    assert children and {c.parent_call_id for c in children} == {"ask1"}
    assert isinstance(children[-1].event, FinalEvent)
    # The child's events came before the parent's tool result: streamed live.
    assert events.index(children[-1]) < events.index(tool_result)
    assert child.metadata == {
        "parent_session": "root",
        "parent_step": 1,
        "parent_call": "ask1",
    }
    started = next(e for e in child_events if e.type == "run_started")
    assert started.data["input"] == "why tides?" and started.data["agent"] == "researcher"


async def test_an_agent_marked_as_tool_is_offered_as_ask_name() -> None:
    data = delegating("ask__researcher", {"task": "why tides?"})
    async with make(data) as agent:
        offered = set(agent.tools)
        result, events = await run_all(agent)
    assert {"run_subagent", "ask__researcher"} <= offered and "ask__critic" not in offered
    assert result.outcome == "completed", result.error
    assert finals(events)["ask1"].output == "tides follow the moon"


async def test_run_subagent_names_only_configured_agents() -> None:
    data = delegating("run_subagent", {"agent": "stranger", "task": "x"})
    async with make(data) as agent:
        result, events = await run_all(agent)
    refused = next(e for e in events if isinstance(e, ToolResultEvent))
    assert refused.is_error and refused.refused_by == "arguments"
    assert "researcher" in refused.content and not finals(events)
    assert result.outcome == "completed"


async def test_agent_tool_makes_any_definition_a_tool() -> None:
    data = config([], runner="loop")
    del data["orchestration"]
    data["providers"] = {"small": {"provider": "scripted", "script": ["from the small model"]}}
    data["llm"] = {
        "provider": "scripted",
        "script": [
            {"tool_calls": [{"name": "ask_helper", "arguments": {"task": "help"}}]},
            "Helper said: done",
        ],
    }
    helper = agent_tool({"name": "helper", "llm": "small", "tools": []})
    async with make(data, extra_tools=[helper]) as agent:
        result, events = await run_all(agent)
    assert result.outcome == "completed", result.error
    assert [e.content for e in events if isinstance(e, ToolResultEvent)] == ["from the small model"]
    assert next(e.call.name for e in events if isinstance(e, ToolCallEvent)) == "ask_helper"
