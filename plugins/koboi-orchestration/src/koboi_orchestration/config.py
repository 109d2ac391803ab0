"""The ``orchestration:`` config section: the agents, how they are routed and run.

Only pydantic and the stdlib here: loading the plugin stays cheap. The keys
follow koboi-agent's ``orchestration`` section where they mean the same thing
(``router``, ``execution.mode``, ``agents[]`` with ``depends_on`` and
``conditionals``); what this section checks alone (names, edges, cycles) is
checked when the config loads, what needs the rest of the config (the
parent's tools, mode and sandbox) when the agent is assembled
(:mod:`koboi_orchestration.assembly`).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ExecutionMode = Literal["sequential", "parallel", "dag", "conditional", "dynamic", "deep_research"]
RouterType = Literal["keyword", "llm", "hybrid"]
ModeName = Literal["chat", "plan", "act", "auto", "yolo"]

#: What an agent's name may be: it names a node, a session tag and a tool (ask__<name>).
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,47}$")


class Condition(BaseModel):
    """When a conditional edge is taken, judged on the source node's output.

    Exactly one test: ``contains`` / ``not_contains`` (case-insensitive
    substrings), ``regex`` (Python, searched case-insensitively) or ``equals``
    (the whole output, stripped, case-insensitively).
    """

    model_config = ConfigDict(extra="forbid")

    contains: str | None = Field(default=None, description="Taken when the output contains this.")
    not_contains: str | None = Field(
        default=None, description="Taken when the output does not contain this."
    )
    regex: str | None = Field(
        default=None, description="Taken when this regular expression matches the output."
    )
    equals: str | None = Field(
        default=None, description="Taken when the whole output (stripped) is this."
    )

    @model_validator(mode="after")
    def _one_test(self) -> Condition:
        given = [k for k in ("contains", "not_contains", "regex", "equals") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                "a condition needs exactly one of contains, not_contains, regex, equals"
                + (f" (it has {', '.join(given)})" if given else "")
            )
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {self.regex!r}: {exc}") from None
        return self

    def holds(self, output: str) -> bool:
        text = output.casefold()
        if self.contains is not None:
            return self.contains.casefold() in text
        if self.not_contains is not None:
            return self.not_contains.casefold() not in text
        if self.regex is not None:
            return re.search(self.regex, output, re.IGNORECASE) is not None
        return output.strip().casefold() == (self.equals or "").strip().casefold()

    def describe(self) -> str:
        for key in ("contains", "not_contains", "regex", "equals"):
            value = getattr(self, key)
            if value is not None:
                return f"{key}: {value}"
        return ""  # pragma: no cover - validated to have one


class ConditionalEdge(BaseModel):
    """An edge from this agent to ``to``, taken only when ``when`` holds on its output."""

    model_config = ConfigDict(extra="forbid")

    to: str = Field(description="The agent this edge leads to.")
    when: Condition = Field(description="The test on this agent's output.")


class AgentDef(BaseModel):
    """One agent of the orchestration, defined like an agent of its own.

    It runs as a child run of the orchestrating agent: in a session of its own,
    under the parent's whole pipeline (policy, guardrails, approvals, sandbox),
    with at most the parent's tools and mode, sharing its budgets.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Unique name: the node's id in the graph and its session's tag.")
    description: str = Field(
        default="", description="What this agent is for (routers and planners read it)."
    )
    system_prompt: str = Field(default="", description="This agent's own system prompt.")
    keywords: list[str] = Field(
        default_factory=list, description="Words the keyword router matches in the user message."
    )
    tools: list[str] | None = Field(
        default=None,
        description="The tools it may use, each one the parent has in tools.builtin; omitted: "
        "all of the parent's tools; []: none.",
    )
    llm: str | None = Field(
        default=None,
        description="The model it calls: the name of an entry of the top-level providers "
        "section; omitted: the parent's model.",
    )
    mode: ModeName | None = Field(
        default=None,
        description="Its agent.mode: the parent's or a stricter one (chat < plan < act < auto < "
        "yolo); omitted: the parent's.",
    )
    sandbox: str | None = Field(
        default=None,
        description="Must be the parent's sandbox.backend if given: a sub-agent runs in its "
        "parent's sandbox.",
    )
    depends_on: list[str] = Field(
        default_factory=list,
        description="Agents whose output this one needs first (dag and conditional modes).",
    )
    conditionals: list[ConditionalEdge] = Field(
        default_factory=list,
        description="Edges from this agent taken only when a test on its output holds.",
    )
    max_iterations: int | None = Field(
        default=None, ge=1, description="Most model calls of one run of this agent."
    )
    max_total_tokens: int | None = Field(
        default=None, gt=0, description="Token budget of this agent alone (the parent's is shared)."
    )
    max_cost_usd: float | None = Field(
        default=None, gt=0, description="Cost budget of this agent alone (the parent's is shared)."
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Wall-clock limit of this node; default execution.node_timeout_seconds.",
    )
    as_tool: bool = Field(
        default=False,
        description="Also offer this agent to the parent's model as a tool ask__<name>.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"{value!r} is not a valid agent name: a letter, then letters, digits, '_' or "
                "'-' (at most 48)"
            )
        return value


class RouterSettings(BaseModel):
    """Which agents answer a message, in sequential and parallel modes."""

    model_config = ConfigDict(extra="forbid")

    type: RouterType = Field(
        default="keyword",
        description="keyword: agents' keywords found in the message; llm: the model picks "
        "(a journaled side call); hybrid: keyword when it is confident enough, else llm.",
    )
    confidence_threshold: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="hybrid: the keyword router's confidence needed to skip the model.",
    )
    fallback: str = Field(
        default="all",
        description="Who answers when the router picks nobody: 'all' agents, or one agent's name.",
    )


class ExecutionSettings(BaseModel):
    """How the agents run."""

    model_config = ConfigDict(extra="forbid")

    mode: ExecutionMode = Field(
        default="dag",
        description="sequential (each agent gets the previous one's output), parallel (all at "
        "once, answers joined), dag (depends_on), conditional (dag with conditional edges), "
        "dynamic (a planner model writes the graph), deep_research (koboi-research's runner).",
    )
    max_parallel: int = Field(
        default=4, ge=1, le=256, description="Most agents running at the same time."
    )
    node_timeout_seconds: float | None = Field(
        default=None, gt=0, description="Wall-clock limit of each node (an agent's own wins)."
    )
    on_node_failure: Literal["stop", "continue"] = Field(
        default="stop",
        description="stop: a node that fails ends the run failed (running nodes finish, no new "
        "one starts); continue: its dependents are skipped, the others go on.",
    )
    output: str | None = Field(
        default=None,
        description="The node whose output is the answer; default: the output of the nodes "
        "nothing depends on (joined under their names when several ran).",
    )
    max_replans: int = Field(
        default=1,
        ge=0,
        le=5,
        description="dynamic: how many times the planner is asked again after an invalid plan.",
    )
    max_nodes: int = Field(
        default=20, ge=1, le=1000, description="dynamic: most nodes a plan may have."
    )


class OrchestrationSection(BaseModel):
    """Several agents under one orchestrating agent (``agent.runner: orchestration``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Off: the section is kept but nothing orchestrates (agents-as-tools too).",
    )
    router: RouterSettings | None = Field(
        default=None,
        description="Route each message to some of the agents (sequential and parallel modes).",
    )
    execution: ExecutionSettings = Field(
        default_factory=ExecutionSettings, description="How the agents run."
    )
    agents: list[AgentDef] = Field(default_factory=list, description="The agents, in order.")

    @model_validator(mode="after")
    def _consistent(self) -> OrchestrationSection:
        names = [a.name for a in self.agents]
        twice = sorted(n for n, times in Counter(names).items() if times > 1)
        if twice:
            raise ValueError(f"agent names must be unique: {', '.join(twice)} appear twice")
        known = set(names)
        for index, agent in enumerate(self.agents):
            where = f"agents[{index}] ({agent.name})"
            for dep in agent.depends_on:
                if dep not in known:
                    raise ValueError(f"{where}.depends_on: no agent is named {dep!r}")
                if dep == agent.name:
                    raise ValueError(f"{where}.depends_on: an agent cannot depend on itself")
            for edge in agent.conditionals:
                if edge.to not in known:
                    raise ValueError(f"{where}.conditionals: no agent is named {edge.to!r}")
                if edge.to == agent.name:
                    raise ValueError(f"{where}.conditionals: an edge cannot lead to itself")
        mode = self.execution.mode
        if self.router is not None and mode not in ("sequential", "parallel"):
            raise ValueError(
                f"router: routing applies to the sequential and parallel modes, not {mode!r}"
            )
        fallback = self.router.fallback if self.router is not None else "all"
        if fallback != "all" and fallback not in known:
            raise ValueError(f"router.fallback: no agent is named {fallback!r} (or write 'all')")
        output = self.execution.output
        if output is not None and mode != "dynamic" and output not in known:
            raise ValueError(f"execution.output: no agent is named {output!r}")
        if mode in ("dag", "conditional"):
            from koboi_orchestration.graph import Graph, GraphError

            try:
                Graph.from_agents(self.agents)
            except GraphError as exc:
                raise ValueError(str(exc)) from None
        if mode in ("sequential", "parallel", "dag", "conditional", "dynamic") and not names:
            raise ValueError(f"execution.mode {mode!r} needs at least one agent under agents")
        return self
