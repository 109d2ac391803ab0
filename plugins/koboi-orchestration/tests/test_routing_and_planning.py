"""Routers (keyword, LLM, hybrid) and the planner of the dynamic mode: what they pick is
journaled, and a plan is checked (no cycle, known agents only) before it runs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from orchestration_kit import agent_def, config, finals, make, plugin_events, run_all

from koboi.config import load_config
from koboi.errors import ConfigError

pytestmark = pytest.mark.anyio


def desk(**router: Any) -> dict[str, Any]:
    agents = [
        agent_def("billing", "billing answers", keywords=["invoice", "refund"]),
        agent_def("tech", "tech answers", keywords=["error", "crash", "login"]),
        agent_def("sales", "sales answers", keywords=["price"]),
    ]
    for definition, _ in agents:
        definition["description"] = f"{definition['name']} questions"
    llm = router.pop("llm", None)
    return config(agents, mode="parallel", llm=llm, orchestration={"router": router})


def rules(*pairs: tuple[str, str]) -> dict[str, Any]:
    """A root model answering side calls by the regex their prompt matches."""
    return {
        "provider": "scripted",
        "rules": [{"match": m, "reply": r} for m, r in pairs],
        "fallback": "not json",
    }


async def test_the_keyword_router_sends_the_message_to_the_agents_it_names() -> None:
    async with make(desk(type="keyword")) as agent:
        result, events = await run_all(agent, "My login shows an error after the refund")
        journal = await agent.store.read("root")
    assert set(finals(events)) == {"tech"}
    assert result.output == "tech answers"
    (routed,) = plugin_events(journal, "routed")
    assert routed["agents"] == ["tech"] and routed["used"] == "keyword"
    assert routed["confidence"] == pytest.approx(2 / 4)


async def test_nobody_matched_falls_back() -> None:
    async with make(desk(type="keyword", fallback="sales")) as agent:
        result, _ = await run_all(agent, "hello there")
    assert result.output == "sales answers"


async def test_the_llm_router_is_a_journaled_side_call_answered_again_from_the_journal() -> None:
    answer = json.dumps({"agents": ["sales", "billing"], "confidence": 0.9, "reason": "money"})
    data = desk(type="llm", llm=rules((".", answer)))
    async with make(data) as agent:
        result, events = await run_all(agent, "how much, and can I get an invoice?")
        journal = await agent.store.read("root")
    assert set(finals(events)) == {"billing", "sales"}
    assert result.output == "## billing\n\nbilling answers\n\n## sales\n\nsales answers"
    side = [e for e in journal if e.type == "side_call_finished"]
    assert [e.data["purpose"] for e in side] == ["orchestration.route"]
    (routed,) = plugin_events(journal, "routed")
    assert routed == {
        "router": "llm",
        "used": "llm",
        "agents": ["billing", "sales"],
        "confidence": 0.9,
        "reason": "money",
    }


async def test_an_llm_answer_that_cannot_be_used_falls_back_to_keywords() -> None:
    data = desk(type="llm", llm=rules((".", '{"agents": ["nobody"]}')))
    async with make(data) as agent:
        result, _ = await run_all(agent, "the app will crash")
        journal = await agent.store.read("root")
    assert result.output == "tech answers"
    (routed,) = plugin_events(journal, "routed")
    assert routed["used"] == "keyword"
    assert routed["reason"].startswith("the model named no known agent (nobody); keyword router")


async def test_the_hybrid_router_asks_the_model_only_when_keywords_are_unsure() -> None:
    answer = json.dumps({"agents": ["sales"], "confidence": 0.8})
    sure = desk(type="hybrid", confidence_threshold=0.5, llm=rules((".", answer)))
    async with make(sure) as agent:
        await run_all(agent, "login error crash")  # 3 keywords of tech: confidence 0.75
        confident = await agent.store.read("root")
        await run_all(agent, "what is the price of a refund", session_id="other")  # a tie
        unsure = await agent.store.read("other")
    assert not [e for e in confident if e.type == "side_call_started"]
    assert plugin_events(confident, "routed")[0]["used"] == "keyword"
    assert plugin_events(unsure, "routed")[0] | {"reason": ""} == {
        "router": "hybrid",
        "used": "llm",
        "agents": ["sales"],
        "confidence": 0.8,
        "reason": "",
    }


def planner(*pairs: tuple[str, Any]) -> dict[str, Any]:
    return rules(*((m, r if isinstance(r, str) else json.dumps(r)) for m, r in pairs))


def team(llm: dict[str, Any], **execution: Any) -> dict[str, Any]:
    agents = [
        agent_def("researcher", "found: tides follow the moon"),
        agent_def("writer", "Tides follow the moon."),
    ]
    return config(agents, mode="dynamic", llm=llm, execution=execution)


PLAN = {
    "nodes": [
        {"id": "find", "agent": "researcher", "task": "Find why tides happen"},
        {"id": "write", "agent": "writer", "task": "Write it up", "depends_on": ["find"]},
    ]
}


async def test_a_planner_writes_the_graph_which_is_journaled_then_run() -> None:
    async with make(team(planner(("tides", PLAN)))) as agent:
        result, events = await run_all(agent, "Why are there tides?")
        journal = await agent.store.read("root")
    assert result.outcome == "completed", result.error
    assert result.output == "Tides follow the moon."
    assert set(finals(events)) == {"find", "write"}
    (planned,) = plugin_events(journal, "planned")
    assert [n["depends_on"] for n in planned["plan"]["nodes"]] == [[], ["find"]]
    assert [e["node"] for e in plugin_events(journal, "node_started")] == ["find", "write"]


CYCLE = {
    "nodes": [
        {"id": "a", "agent": "researcher", "depends_on": ["b"]},
        {"id": "b", "agent": "writer", "depends_on": ["a"]},
    ]
}


async def test_an_invalid_plan_is_refused_before_it_runs_and_asked_for_again() -> None:
    llm = planner(("could not be used: the graph has a cycle", PLAN), ("tides", CYCLE))
    async with make(team(llm)) as agent:
        result, _events = await run_all(agent, "Why tides?")
        journal = await agent.store.read("root")
    assert result.outcome == "completed", result.error
    assert [e.data["purpose"] for e in journal if e.type == "side_call_finished"] == [
        "orchestration.plan",
        "orchestration.plan",
    ]
    assert len(plugin_events(journal, "planned")) == 1


@pytest.mark.parametrize(
    ("plan", "error"),
    [
        (CYCLE, "the graph has a cycle: a -> b -> a"),
        (
            {"nodes": [{"id": "x", "agent": "hacker", "task": "rm -rf"}]},
            "node 'x' asks for agent 'hacker', which is not one of the agents (researcher, writer)",
        ),
        ({"nodes": [{"id": "x", "agent": "writer", "depends_on": ["y"]}]}, "no node 'y'"),
        ("no plan at all", "the plan is not JSON"),
    ],
)
async def test_a_plan_that_stays_invalid_fails_the_run_in_one_line(plan: Any, error: str) -> None:
    async with make(team(planner((".", plan)), max_replans=1)) as agent:
        result, events = await run_all(agent)
    assert result.outcome == "failed"
    assert result.error is not None and result.error.startswith("the plan could not be used: ")
    assert error in result.error
    assert not finals(events)  # nothing ran


async def test_a_planner_may_answer_without_a_plan() -> None:
    async with make(team(planner((".", {"answer": "No agents needed: 4."})))) as agent:
        result, events = await run_all(agent, "2+2?")
    assert result.output == "No agents needed: 4." and not finals(events)


def test_graph_problems_of_a_config_are_config_errors(tmp_path: Any) -> None:
    data = config([agent_def("a", "x", depends_on=["b"]), agent_def("b", "y", depends_on=["a"])])
    path = tmp_path / "cycle.yaml"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"orchestration.*the graph has a cycle: a -> b -> a"):
        load_config(path)
    data = config([agent_def("a", "x")], mode="dag", orchestration={"router": {"type": "keyword"}})
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match="routing applies to the sequential and parallel modes"):
        load_config(path)
