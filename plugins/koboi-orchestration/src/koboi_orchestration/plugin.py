"""koboi hooks of koboi-orchestration.

Only ``@hookimpl`` functions and the factories they name here: the config
model (pydantic), the runner, the tools and the ``koboi graph`` command are
imported when first used, so `koboi --help` loads none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.hookspecs import (
        RegisterCommand,
        RegisterConfigSection,
        RegisterEventSummary,
        RegisterRunner,
        RegisterTool,
        RegisterToolset,
    )
    from koboi.runners import Runner
    from koboi.tools import Tool
    from koboi.toolsets import Toolset


@hookimpl
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    from koboi_orchestration.config import OrchestrationSection

    register(
        "orchestration",
        OrchestrationSection,
        description="Agents run by a router, in sequence, in parallel, as a DAG or a plan.",
    )


def create_runner(options: Any, config: AgentConfig) -> Runner:
    from koboi_orchestration.runner import create_runner

    return create_runner(options, config)


def _runner_in_mode(mode: str) -> Any:
    def create(options: Any, config: AgentConfig) -> Runner:
        from koboi_orchestration.runner import create_runner

        return create_runner(options, config, mode=mode)

    return create


#: ``agent.runner: dag`` (and the other modes) is ``orchestration`` in that mode.
MODE_RUNNERS = ("sequential", "parallel", "dag", "conditional", "dynamic")


@hookimpl
def koboi_register_runners(register: RegisterRunner) -> None:
    register(
        "orchestration",
        create_runner,
        description="Runs the orchestration section's agents (route, sequence, DAG, plan).",
    )
    for mode in MODE_RUNNERS:
        register(
            mode,
            _runner_in_mode(mode),
            description=f"The orchestration runner in execution.mode {mode}.",
        )


def create_run_subagent(config: AgentConfig) -> Tool:
    """``run_subagent``: refused when the agent is assembled if an agent asks for more
    than its parent has."""
    from koboi.errors import KoboiError
    from koboi_orchestration.assembly import check_agents, section_of
    from koboi_orchestration.tools import RunSubagentTool

    section = section_of(config)
    if section is None or not section.enabled or not section.agents:
        raise KoboiError(
            "tool 'run_subagent' needs agents to hand tasks to: add them under "
            "orchestration.agents (docs/orchestration.md)"
        )
    check_agents(config, section)
    return RunSubagentTool(section.agents)


@hookimpl
def koboi_register_tools(register: RegisterTool) -> None:
    register(
        "run_subagent",
        create_run_subagent,
        description="Hand a task to one of the orchestration section's agents.",
    )


def create_agent_tools(config: AgentConfig) -> Toolset | None:
    """``ask__<name>`` for the agents with ``as_tool: true`` (None: there are none)."""
    from koboi_orchestration.assembly import check_agents, section_of
    from koboi_orchestration.tools import AgentTools

    section = section_of(config)
    if section is None or not section.enabled:
        return None
    offered = [a for a in section.agents if a.as_tool]
    if not offered:
        return None
    check_agents(config, section)
    return AgentTools(offered)


@hookimpl
def koboi_register_toolsets(register: RegisterToolset) -> None:
    register(
        "orchestration",
        create_agent_tools,
        description="ask__<agent>: the orchestration agents marked as_tool, as tools.",
    )


@hookimpl
def koboi_register_commands(register: RegisterCommand) -> None:
    register(
        "graph",
        "koboi_orchestration.cli:graph_app",
        help="Draw a config's orchestration graph (mermaid or JSON).",
    )


@hookimpl
def koboi_register_event_summaries(register: RegisterEventSummary) -> None:
    register(
        "koboi_orchestration.summaries:summarize",
        description="orchestration events (routes, plans, nodes) in one line",
    )
