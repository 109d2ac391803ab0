"""Helpers of koboi-orchestration's tests: configs of scripted agents, run in-process.

Each agent of a test's graph calls a model of its own (an entry of the
``providers`` section, a scripted model whose script is that agent's answers),
so what each node says is decided by the test, whatever order nodes run in.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from koboi import AllowAllApprover, ChildEvent, FinalEvent, KoboiAgent, Tool, hookimpl
from koboi.events import AgentEvent, RunResult
from koboi.plugins import PluginHost
from koboi.store import JournalEvent, Store


def script(*turns: Any) -> dict[str, Any]:
    """A ``providers`` entry: a scripted model answering ``turns`` in order."""
    return {"provider": "scripted", "script": list(turns), "on_exhausted": "error"}


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    """A script turn that calls ``tool``."""
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def agent_def(name: str, *turns: Any, **keys: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """An agent named ``name`` whose model answers ``turns`` (and its providers entry)."""
    definition = {"name": name, "llm": f"{name}_model", "tools": [], **keys}
    return definition, {f"{name}_model": script(*turns)}


def config(
    agents: Sequence[tuple[dict[str, Any], dict[str, Any]]],
    *,
    mode: str = "dag",
    runner: str = "orchestration",
    agent: dict[str, Any] | None = None,
    llm: dict[str, Any] | None = None,
    tools: Sequence[str] = (),
    execution: dict[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    providers: dict[str, Any] = {}
    for _, entry in agents:
        providers.update(entry)
    return {
        "agent": {
            "name": "boss",
            "runner": runner,
            "stream": False,
            "max_iterations": 50,
            **(agent or {}),
        },
        "llm": llm or {"provider": "scripted", "on_exhausted": "error"},
        "providers": providers,
        "tools": {"builtin": list(tools)},
        "orchestration": {
            **sections.pop("orchestration", {}),
            "execution": {"mode": mode, **(execution or {})},
            "agents": [copy.deepcopy(d) for d, _ in agents],
        },
        **sections,
    }


class TestTools:
    """A plugin registering the tools a test gives (so a config can enable them)."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools = list(tools)

    @hookimpl
    def koboi_register_tools(self, register: Any) -> None:
        for made in self.tools:
            register(made)


def host_with(tools: Sequence[Tool] = ()) -> PluginHost:
    """The installed plugins, and a plugin registering ``tools``."""
    host = PluginHost(strict=True)
    host.load()
    if tools:
        host.add_plugin(TestTools(tools), "test-tools")
    return host


def make(data: dict[str, Any], *, tools: Sequence[Tool] = (), **kwargs: Any) -> KoboiAgent:
    """An agent of ``data`` whose tools.builtin may name ``tools`` (approvals: yes)."""
    kwargs.setdefault("approver", AllowAllApprover())
    return KoboiAgent.from_dict(data, host=host_with(tools), **kwargs)


async def run_all(
    agent: KoboiAgent, message: str = "go", session_id: str = "root"
) -> tuple[RunResult, list[AgentEvent]]:
    events = [e async for e in agent.stream(message, session_id=session_id)]
    final = events[-1]
    assert isinstance(final, FinalEvent)
    return final.result, events


def finals(events: Sequence[AgentEvent]) -> dict[str, RunResult]:
    """The result of each node's child, by tag (a tool's child: by its call id)."""
    return {
        str(e.tag or e.parent_call_id): e.event.result
        for e in events
        if isinstance(e, ChildEvent) and isinstance(e.event, FinalEvent)
    }


def plugin_events(events: Sequence[JournalEvent], kind: str) -> list[dict[str, Any]]:
    return [dict(e.data) for e in events if e.type == f"orchestration.{kind}"]


async def child_input(store: Store, session_id: str) -> str:
    """The message a child run was given (its ``run_started`` input)."""
    events = await store.read(session_id)
    return str(next(e.data["input"] for e in events if e.type == "run_started"))
