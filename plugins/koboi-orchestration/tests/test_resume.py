"""Resuming an orchestrated run: finished nodes are not run again, the node in flight
continues where it stopped, the route and the plan are not asked again.

The process "dies" in-process: the store fails (like a lost disk) when it is asked
to commit a chosen event and refuses every write after, so the journal is left as a
kill would leave it. The real thing, with SIGKILL, is in the root tests/.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from orchestration_kit import agent_def, call, config, make, plugin_events, run_all

from koboi import ToolContext, tool
from koboi import journal as J
from koboi.errors import SessionNotFound
from koboi.store import InMemoryStore, JournalEvent, NewEvent
from koboi.subagents import child_session_id
from koboi_testing.crash import Died, DyingStore

pytestmark = pytest.mark.anyio


written: list[str] = []


@tool(risk="safe", idempotent=False, thread=False)
def note(line: str, ctx: ToolContext) -> str:
    """Append a line to the notes (not idempotent: must happen once).

    Args:
        line: What to write.
    """
    written.append(line)
    return f"noted {line}"


def graph() -> dict[str, Any]:
    return config(
        [
            agent_def("intake", call("note", line="intake"), "topic: tides", tools=["note"]),
            agent_def("left", call("note", line="left"), "the moon", depends_on=["intake"],
                      tools=["note"]),
            agent_def("right", call("note", line="right"), "the sun", depends_on=["intake"],
                      tools=["note"]),
            agent_def("review", call("note", line="review"), "approved",
                      depends_on=["left", "right"], tools=["note"],
                      conditionals=[{"to": "publish", "when": {"contains": "approved"}}]),
            agent_def("publish", call("note", line="publish"), "Tides: moon and sun.",
                      tools=["note"]),
        ],
        mode="conditional",
        tools=["note"],
        execution={"max_parallel": 2},
    )  # fmt: skip


def node(name: str) -> str:
    return child_session_id("root", f"1:node:{name}")


async def journal(store: InMemoryStore, session: str) -> list[JournalEvent]:
    """A session's events; none for a node that never started."""
    try:
        return await store.read(session)
    except SessionNotFound:
        return []


KILL_POINTS: dict[str, Callable[[str, NewEvent], bool]] = {
    # A node's child asked its model, nothing answered yet.
    "in a model call": lambda sid, e: sid == node("review") and e.type == J.MODEL_CALL_STARTED,
    # The child wrote its note; the end of the tool call was never journaled.
    "after a tool's effect": lambda sid, e: sid == node("left") and e.type == J.TOOL_CALL_FINISHED,
    # The child finished; the parent never recorded that the node did.
    "before the node's end": lambda sid, e: (
        sid == "root" and e.type == "orchestration.node_finished" and e.data["node"] == "right"
    ),
    # Everything ran; only the run's end is missing.
    "before the run's end": lambda sid, e: sid == "root" and e.type == J.RUN_FINISHED,
}


@pytest.mark.parametrize("where", list(KILL_POINTS))
async def test_a_killed_run_resumes_only_what_did_not_finish(where: str) -> None:
    written.clear()
    async with make(graph(), tools=[note]) as agent:
        baseline, _ = await run_all(agent)
    assert baseline.outcome == "completed"
    expected = sorted(written)
    written.clear()
    store = DyingStore(KILL_POINTS[where])
    async with make(graph(), tools=[note], store=store) as agent:
        with pytest.raises(Died):
            await run_all(agent)
    names = ("intake", "left", "right", "review", "publish")
    before = {n: len(await journal(store, node(n))) for n in names}
    finished_before = {e["node"] for e in plugin_events(await store.read("root"), "node_finished")}
    store.restart()
    async with make(graph(), tools=[note], store=store) as agent:
        result = await agent.resume_run("root")
        journals = {n: await journal(store, node(n)) for n in names}
    assert result.outcome == "completed", result.error
    assert result.output == baseline.output
    # No non-idempotent call ran twice; one in doubt ("after a tool's effect") ran once.
    assert sorted(written) == expected, written
    for name, events in journals.items():
        assert [e.type for e in events].count(J.RUN_STARTED) == 1, name
        started = [e.data["call_id"] for e in events if e.type == J.TOOL_CALL_STARTED]
        assert len(started) == len(set(started)), name
        if name in finished_before:
            # A node that had finished was not run again: its child wrote nothing more.
            assert len(events) == before[name], name
    if where == "after a tool's effect":
        doubt = [e for e in journals["left"] if e.type == J.TOOL_CALL_INTERRUPTED]
        assert len(doubt) == 1


async def test_the_route_and_the_plan_are_not_asked_again() -> None:
    plan = {
        "nodes": [
            {"id": "a", "agent": "intake", "task": "start"},
            {"id": "b", "agent": "left", "task": "go on", "depends_on": ["a"]},
        ]
    }
    data = config(
        [agent_def("intake", "topic"), agent_def("left", "moon")],
        mode="dynamic",
        llm={"provider": "scripted", "rules": [{"match": ".", "reply": json.dumps(plan)}]},
    )
    store = DyingStore(lambda sid, e: sid == child_session_id("root", "1:node:b"))
    async with make(data, store=store) as agent:
        with pytest.raises(Died):
            await run_all(agent)
    store.restart()
    async with make(data, store=store) as agent:
        result = await agent.resume_run("root")
    journal = await store.read("root")
    assert result.output == "moon"
    assert [e.type for e in journal].count("side_call_started") == 1
    assert len(plugin_events(journal, "planned")) == 1
