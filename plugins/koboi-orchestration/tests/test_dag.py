"""Running a graph: outputs along the declared edges, conditional edges, parallel
branches under a bound, a node's timeout and budget, failures."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from orchestration_kit import (
    agent_def,
    call,
    child_input,
    config,
    finals,
    make,
    plugin_events,
    run_all,
)

from koboi import ToolContext, tool
from koboi.runners import Runner
from koboi.subagents import child_session_id
from koboi_orchestration import OrchestrationRunner, OrchestrationSection
from koboi_testing.contracts import RunnerContract

pytestmark = pytest.mark.anyio


def five_nodes(review_says: str = "verdict: approved") -> list[Any]:
    """intake -> (left, right) -> review -> publish (when approved) / rework (when rejected)."""
    return [
        agent_def("intake", "the topic is tides"),
        agent_def("left", "the moon pulls the sea", depends_on=["intake"]),
        agent_def("right", "the sun helps a little", depends_on=["intake"]),
        agent_def(
            "review",
            review_says,
            depends_on=["left", "right"],
            conditionals=[
                {"to": "publish", "when": {"contains": "approved"}},
                {"to": "rework", "when": {"regex": r"\brejected\b"}},
            ],
        ),
        agent_def("publish", "Tides: the moon, and a little the sun."),
        agent_def("rework", "Let us try again."),
    ]


async def test_outputs_flow_along_the_edges_and_a_conditional_edge_picks_the_branch() -> None:
    agent = make(config(five_nodes(), mode="conditional"))
    async with agent:
        result, events = await run_all(agent, "Explain the tides")
        journal = await agent.store.read("root")
        review_input = await child_input(agent.store, child_session_id("root", "1:node:review"))
        publish_input = await child_input(agent.store, child_session_id("root", "1:node:publish"))
    assert result.outcome == "completed", result.error
    assert result.output == "Tides: the moon, and a little the sun."
    # review got both branches' output; publish got review's (the edge taken).
    assert review_input == (
        "Explain the tides\n\n--- Output of left ---\nthe moon pulls the sea\n\n"
        "--- Output of right ---\nthe sun helps a little\n"
    )
    assert "--- Output of review ---\nverdict: approved" in publish_input
    assert set(finals(events)) == {"intake", "left", "right", "review", "publish"}
    skipped = plugin_events(journal, "node_skipped")
    assert skipped == [
        {
            "node": "rework",
            "reason": "no edge into it was taken (review: regex: \\brejected\\b does not hold)",
        }
    ]
    started = [e["node"] for e in plugin_events(journal, "node_started")]
    assert started[0] == "intake" and set(started[1:3]) == {"left", "right"}
    assert started[3:] == ["review", "publish"]


async def test_the_other_branch_when_the_condition_says_so() -> None:
    agent = make(config(five_nodes("verdict: rejected"), mode="conditional"))
    async with agent:
        result, events = await run_all(agent)
    assert result.output == "Let us try again."
    assert "publish" not in finals(events)


gates: dict[str, anyio.Event] = {}


@tool(risk="safe", idempotent=True, thread=False)
async def meet(name: str, other: str, ctx: ToolContext) -> str:
    """Wait until the other branch has arrived too.

    Args:
        name: This branch.
        other: The branch to wait for.
    """
    gates.setdefault(name, anyio.Event()).set()
    with anyio.fail_after(0.5):
        await gates.setdefault(other, anyio.Event()).wait()
    return f"{name} met {other}"


def branches(**execution: Any) -> dict[str, Any]:
    gates.clear()
    return config(
        [
            agent_def("a", call("meet", name="a", other="b"), "a done", tools=["meet"]),
            agent_def("b", call("meet", name="b", other="a"), "b done", tools=["meet"]),
        ],
        mode="parallel",
        execution=execution,
        tools=["meet"],
    )


async def test_parallel_branches_run_at_the_same_time() -> None:
    agent = make(branches(max_parallel=2), tools=[meet])
    async with agent:
        result, events = await run_all(agent)
    assert result.outcome == "completed", result.error
    assert result.output == "## a\n\na done\n\n## b\n\nb done"
    tools = [m.content for r in finals(events).values() for m in r.messages if m.role == "tool"]
    assert sorted(tools) == ["a met b", "b met a"]


async def test_max_parallel_bounds_how_many_run_at_once() -> None:
    # The control of the test above: one at a time, neither branch ever meets the other.
    agent = make(branches(max_parallel=1), tools=[meet])
    async with agent:
        _result, events = await run_all(agent)
    first = [m.content for m in finals(events)["a"].messages if m.role == "tool"]
    assert first == ["tool 'meet' timed out after 300 s (tools.timeout_seconds)"] or (
        "a met b" not in first and first[0].startswith("tool 'meet' failed")
    ), first


@tool(risk="safe", idempotent=True, thread=False)
async def dawdle(seconds: float) -> str:
    """Take a while.

    Args:
        seconds: How long.
    """
    await anyio.sleep(seconds)
    return "done"


async def test_a_node_that_outlives_its_timeout_fails_the_run() -> None:
    data = config(
        [
            agent_def("slow", call("dawdle", seconds=5), "never", tools=["dawdle"]),
            agent_def("after", "unreachable", depends_on=["slow"]),
        ],
        execution={"node_timeout_seconds": 0.3},
        tools=["dawdle"],
    )
    async with make(data, tools=[dawdle]) as agent:
        with anyio.fail_after(4):
            result, _ = await run_all(agent)
        journal = await agent.store.read("root")
        child = await agent.store.read(child_session_id("root", "1:node:slow"))
    assert result.outcome == "failed"
    assert result.error == "node slow: node slow timed out after 0.3 s (its timeout_seconds)"
    assert child[-1].type == "run_finished" and child[-1].data["outcome"] == "cancelled"
    assert [e["node"] for e in plugin_events(journal, "node_skipped")] == ["after"]


async def test_a_nodes_own_step_budget_ends_it() -> None:
    data = config(
        [
            agent_def(
                "loops", call("dawdle", seconds=0), call("dawdle", seconds=0), "x",
                tools=["dawdle"], max_iterations=1,
            ),
            agent_def("fine", "fine"),
        ],
        mode="parallel",
        execution={"on_node_failure": "continue"},
        tools=["dawdle"],
    )  # fmt: skip
    async with make(data, tools=[dawdle]) as agent:
        result, events = await run_all(agent)
    assert finals(events)["loops"].outcome == "max_iterations"
    # on_node_failure: continue — the others went on, and the answer is theirs.
    assert result.outcome == "completed" and result.output == "fine"


async def test_a_failed_node_stops_the_run_by_default() -> None:
    data = config(
        [
            agent_def("first", call("nope")),  # calls a tool it does not have: then no turn left
            agent_def("second", "unreachable", depends_on=["first"]),
        ]
    )
    async with make(data) as agent:
        result, events = await run_all(agent)
    assert result.outcome == "failed"
    assert result.error is not None and result.error.startswith("node first: ")
    assert "second" not in finals(events)


async def test_the_output_node_can_be_named() -> None:
    data = config(
        [agent_def("draft", "a draft"), agent_def("notes", "notes", depends_on=["draft"])],
        execution={"output": "draft"},
    )
    async with make(data) as agent:
        result, _ = await run_all(agent)
    assert result.output == "a draft"


async def test_sequential_mode_is_a_chain() -> None:
    data = config(
        [agent_def("one", "first"), agent_def("two", "second"), agent_def("three", "third")],
        mode="sequential",
    )
    async with make(data) as agent:
        result, _ = await run_all(agent, "start")
        second = await child_input(agent.store, child_session_id("root", "1:node:two"))
        third = await child_input(agent.store, child_session_id("root", "1:node:three"))
    assert result.output == "third"
    assert second == "start\n\n--- Output of one ---\nfirst\n"
    assert third == "start\n\n--- Output of two ---\nsecond\n"


async def test_a_mode_is_also_a_runner_name() -> None:
    data = config([agent_def("one", "first"), agent_def("two", "second")], runner="sequential")
    del data["orchestration"]["execution"]["mode"]
    async with make(data) as agent:
        result, _ = await run_all(agent)
    assert result.output == "second"
    data["orchestration"]["execution"]["mode"] = "parallel"
    with pytest.raises(Exception, match=r"agent\.runner is 'sequential' but orchestration"):
        async with make(data):
            pass


async def test_a_second_message_of_the_session_runs_its_own_nodes() -> None:
    data = config([agent_def("one", "first", "first again"), agent_def("two", "second")])
    async with make(data) as agent:
        first, _ = await run_all(agent, "go")
        second, events = await run_all(agent, "go on")
        journal = await agent.store.read("root")
        sessions = [s.id for s in await agent.store.list_sessions(limit=50)]
    assert first.outcome == second.outcome == "completed"
    assert set(finals(events)) == {"one", "two"}  # ran again, in children of their own
    assert len(sessions) == 5  # the root and two children per run
    assert [e.data["node"] for e in journal if e.type == "orchestration.node_finished"] == [
        "one", "two", "one", "two",
    ]  # fmt: skip


class TestOrchestrationRunnerContract(RunnerContract):
    """The runner passes koboi-testing's RunnerContract: a chain of two agents whose
    children answer from the suite's model."""

    @pytest.fixture
    def runner(self) -> Runner:
        section = OrchestrationSection.model_validate(
            {
                "execution": {"mode": "sequential"},
                "agents": [{"name": "first", "tools": []}, {"name": "second", "tools": []}],
            }
        )
        return OrchestrationRunner(section)

    @pytest.fixture
    def turns(self) -> list[Any]:
        return ["first answer", "second answer"]
