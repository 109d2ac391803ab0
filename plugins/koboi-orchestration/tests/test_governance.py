"""A sub-agent can never do what its parent may not: tools, mode, sandbox, budgets.

Every refusal has its positive control: the same agent, allowed, does the thing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from orchestration_kit import agent_def, call, config, finals, make, plugin_events, run_all

from koboi.errors import KoboiError

pytestmark = pytest.mark.anyio


def shell_child(parent_tools: list[str], **agent: Any) -> dict[str, Any]:
    return config(
        [agent_def("ops", call("run_shell", command="echo hello from the child"), "ran it",
                   tools=["run_shell"])],
        tools=parent_tools,
        agent=agent,
    )  # fmt: skip


async def test_a_sub_agent_with_run_shell_under_a_parent_without_it_is_refused() -> None:
    with pytest.raises(KoboiError) as refused:
        async with make(shell_child(["read_file"])):
            pass  # pragma: no cover - refused when the agent opens
    assert str(refused.value) == (
        "orchestration.agents[0] (ops): tool 'run_shell' is not one of the parent's tools "
        "(tools.builtin: read_file); a sub-agent gets at most what its parent has"
    )


async def test_control_the_same_sub_agent_runs_run_shell_when_its_parent_has_it() -> None:
    async with make(shell_child(["run_shell"])) as agent:
        result, events = await run_all(agent)
    assert result.outcome == "completed", result.error
    shell = [m.content for m in finals(events)["ops"].messages if m.role == "tool"]
    assert len(shell) == 1 and "hello from the child" in shell[0]


async def test_the_run_subagent_tool_is_refused_at_assembly_too() -> None:
    data = shell_child(["read_file", "run_subagent"])
    data["agent"]["runner"] = "loop"
    with pytest.raises(KoboiError, match=r"agents\[0\] \(ops\): tool 'run_shell' is not one"):
        async with make(data):
            pass  # pragma: no cover


def writer(parent_mode: str, child_mode: str | None, workdir: Path) -> dict[str, Any]:
    keys: dict[str, Any] = {"tools": ["write_file"]}
    if child_mode is not None:
        keys["mode"] = child_mode
    return config(
        [agent_def("scribe", call("write_file", path="out.txt", content="written"), "done",
                   **keys)],
        tools=["write_file", "read_file"],
        agent={"mode": parent_mode},
        sandbox={"backend": "passthrough", "workdir": str(workdir)},
    )  # fmt: skip


async def test_a_child_in_act_mode_under_a_parent_in_plan_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KoboiError) as refused:
        async with make(writer("plan", "act", tmp_path)):
            pass  # pragma: no cover
    assert str(refused.value) == (
        "orchestration.agents[0] (scribe): mode 'act' is wider than the parent's agent.mode "
        "'plan' (chat < plan < act < auto < yolo); a sub-agent gets at most what its parent has"
    )
    assert not (tmp_path / "out.txt").exists()


async def test_a_child_under_a_parent_in_plan_mode_cannot_write(tmp_path: Path) -> None:
    async with make(writer("plan", None, tmp_path)) as agent:
        result, events = await run_all(agent)
    assert result.outcome == "completed", result.error
    (refusal,) = [m.content for m in finals(events)["scribe"].messages if m.role == "tool"]
    assert "agent.mode is 'plan'" in refusal
    assert not (tmp_path / "out.txt").exists()


async def test_control_the_same_child_writes_under_a_parent_in_act_mode(tmp_path: Path) -> None:
    async with make(writer("act", "act", tmp_path)) as agent:
        result, _ = await run_all(agent)
    assert result.outcome == "completed", result.error
    assert (tmp_path / "out.txt").read_text() == "written"


async def test_a_child_asking_for_another_sandbox_is_refused(tmp_path: Path) -> None:
    data = writer("act", None, tmp_path)
    data["orchestration"]["agents"][0]["sandbox"] = "restricted"
    with pytest.raises(KoboiError, match="sandbox 'restricted' is not the parent's sandbox"):
        async with make(data):
            pass  # pragma: no cover


def spenders(**agent: Any) -> dict[str, Any]:
    # Each node's one model call reports 100 tokens.
    turn = {"reply": "spent", "usage": {"input_tokens": 60, "output_tokens": 40}}
    return config(
        [
            agent_def("one", turn),
            agent_def("two", turn, depends_on=["one"]),
            agent_def("three", turn, depends_on=["two"]),
            agent_def("four", turn, depends_on=["three"]),
        ],
        agent=agent,
    )


async def test_a_budget_stops_the_whole_tree() -> None:
    async with make(spenders(max_total_tokens=200)) as agent:
        result, events = await run_all(agent)
        journal = await agent.store.read("root")
    assert result.outcome == "budget_exceeded"
    assert {k: r.outcome for k, r in finals(events).items()} == {
        "one": "completed",
        "two": "completed",
        "three": "budget_exceeded",
    }
    assert result.error == (
        "node three: budget exceeded: the run tree of session root used 200 tokens, its limit "
        "is 200 (agent.max_total_tokens)"
    )
    assert [e["node"] for e in plugin_events(journal, "node_skipped")] == ["four"]
    assert result.usage.total_tokens == 200


async def test_control_with_budget_enough_the_tree_completes() -> None:
    async with make(spenders(max_total_tokens=400)) as agent:
        result, _ = await run_all(agent)
    assert result.outcome == "completed" and result.usage.total_tokens == 400


async def test_the_trees_model_calls_count_against_the_parents_steps() -> None:
    async with make(spenders(max_iterations=3)) as agent:
        result, _ = await run_all(agent)
    assert result.outcome == "budget_exceeded"
    assert "3 model calls, its limit is 3 (agent.max_iterations)" in (result.error or "")


async def test_a_tool_started_sub_agent_shares_its_parents_budget() -> None:
    turn = {"reply": "spent", "usage": {"input_tokens": 60, "output_tokens": 40}}
    data = config([agent_def("helper", turn, turn)], tools=["run_subagent"], runner="loop")
    data["agent"]["max_total_tokens"] = 150
    data["llm"] = {
        "provider": "scripted",
        "script": [
            {"tool_calls": [{"name": "run_subagent", "arguments": {"agent": "helper", "task": "t"}}],
             "usage": {"input_tokens": 60, "output_tokens": 40}},
            "unreachable",
        ],
    }  # fmt: skip
    async with make(data) as agent:
        result, events = await run_all(agent)
    # The parent's first call (100) and the child's (100) use the budget up: the parent
    # stops before its next model call.
    assert result.outcome == "budget_exceeded"
    assert result.usage.total_tokens == 200
    assert finals(events)["call_0_0"].outcome == "completed"
