"""Sub-agents as tools: ``run_subagent``, ``ask__<agent>`` and :func:`agent_tool`.

Each call runs one of the ``orchestration.agents`` as a child run of the
calling run (``ctx.run_subagent``): in a session of its own, under the whole
pipeline, with at most the parent's tools and mode, sharing its budgets; its
events reach the parent's stream (and a server's SSE) tagged with the call.
The child's session id is derived from the call, so a call re-run after a
crash (the tool is idempotent for that reason) continues the same child
instead of starting another: its own tool calls keep the in-doubt rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, create_model

from koboi.subagents import child_session_id
from koboi.tools import Risk, Tool, ToolContext, ToolResult
from koboi.toolsets import Toolset, ToolsetContext, provider_safe_name
from koboi_orchestration.assembly import child_options
from koboi_orchestration.config import AgentDef

MAX_TASK_CHARS = 20_000


async def _delegate(agent: AgentDef, task: str, ctx: ToolContext) -> ToolResult:
    run = ctx.run.started_seq if ctx.run is not None else 0
    session = child_session_id(ctx.session_id, f"{run}:call:{ctx.step}:{ctx.call_id}")
    result = await ctx.run_subagent(task, session_id=session, **cast("Any", child_options(agent)))
    data = {
        "agent": agent.name,
        "session_id": result.session_id,
        "outcome": result.outcome,
        "steps": result.steps,
    }
    if result.outcome == "completed":
        return ToolResult(result.output, data=data)
    why = result.error or result.outcome
    return ToolResult(f"the sub-agent {agent.name} did not finish: {why}", True, data)


def _description(agents: Sequence[AgentDef]) -> str:
    return "\n".join(f"- {a.name}: {a.description or a.system_prompt or a.name}" for a in agents)


class RunSubagentTool(Tool):
    """``run_subagent(agent, task)``: one of the configured agents does a task."""

    name = "run_subagent"
    # The call itself changes nothing: the child's every tool call goes through the
    # pipeline, in the parent's mode or a stricter one.
    risk = Risk.SAFE
    # Re-running it after a crash continues the same child (its session comes from the call).
    idempotent = True
    live_events = True

    def __init__(self, agents: Sequence[AgentDef]) -> None:
        self.agents = {a.name: a for a in agents}
        names = tuple(self.agents)
        self.description = (
            "Hand a task to one of these agents and get its answer (it works in a session "
            "of its own, with its own instructions and tools):\n" + _description(agents)
        )
        self.args_model = create_model(
            "RunSubagentArgs",
            __config__=ConfigDict(extra="forbid"),
            agent=(cast("Any", Literal[names]), Field(description="Which agent.")),
            task=(
                str,
                Field(
                    min_length=1,
                    max_length=MAX_TASK_CHARS,
                    description="The task, with everything the agent needs to know.",
                ),
            ),
        )

    async def invoke(self, args: Any, ctx: ToolContext) -> ToolResult:
        return await _delegate(self.agents[args.agent], args.task, ctx)


class _TaskArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(
        min_length=1,
        max_length=MAX_TASK_CHARS,
        description="The task, with everything the agent needs to know.",
    )


class AgentTool(Tool):
    """One agent as a tool of its own: ``ask_<name>(task)`` (``ask__<name>`` when the
    section offers it with ``as_tool``)."""

    risk = Risk.SAFE
    idempotent = True
    live_events = True
    args_model = _TaskArgs

    def __init__(self, agent: AgentDef, *, name: str | None = None) -> None:
        self.agent = agent
        self.name = name or provider_safe_name("ask_", agent.name)
        self.description = f"Ask the agent {agent.name} to do a task and return its answer" + (
            f": {agent.description}" if agent.description else "."
        )

    async def invoke(self, args: Any, ctx: ToolContext) -> ToolResult:
        return await _delegate(self.agent, args.task, ctx)


def agent_tool(agent: AgentDef | Mapping[str, Any], *, name: str | None = None) -> Tool:
    """A tool that runs ``agent`` (an :class:`AgentDef` or its config mapping) as a
    sub-agent of whichever run calls it: ``KoboiAgent(extra_tools=[agent_tool({...})])``.

    What it may do is checked when it runs (at most the caller's tools and mode).
    """
    definition = agent if isinstance(agent, AgentDef) else AgentDef.model_validate(agent)
    return AgentTool(definition, name=name)


class AgentTools(Toolset):
    """Each agent of the section with ``as_tool: true`` as a tool named after it, in the
    namespace ``ask``: the model sees ``ask__<name>``."""

    name = "orchestration"
    namespace = "ask"

    def __init__(self, agents: Sequence[AgentDef]) -> None:
        self._tools: list[Tool] = [AgentTool(a, name=a.name) for a in agents]

    async def open(self, context: ToolsetContext) -> None:
        return None

    def tools(self) -> Sequence[Tool]:
        return list(self._tools)
