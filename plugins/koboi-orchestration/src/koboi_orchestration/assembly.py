"""When the agent is assembled: a sub-agent may never ask for more than its parent has.

Checked once, when the orchestrating agent opens (``KoboiAgent.open``, so
``koboi run``, ``koboi serve`` and the library all refuse it before anything
runs), in one line that says what to fix: an agent's tools must be among the
parent's ``tools.builtin``, its mode the parent's or a stricter one, its
sandbox the parent's, its ``llm`` an entry of ``providers``, its step limit no
larger than the parent's. The kernel checks the same again at run time (a
child is never given more than its parent, whoever asks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from koboi.config import MODE_ORDER, mode_within
from koboi.errors import KoboiError

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi_orchestration.config import AgentDef, OrchestrationSection

SECTION = "orchestration"


def section_of(config: AgentConfig) -> OrchestrationSection | None:
    """The validated ``orchestration`` section, or None when the config has none."""
    from koboi_orchestration.config import OrchestrationSection

    section = config.section(SECTION)
    if section is None:
        return None
    if not isinstance(section, OrchestrationSection):  # pragma: no cover - registered model
        raise TypeError(f"the {SECTION!r} section is a {type(section).__name__}")
    return section


def check_agents(config: AgentConfig, section: OrchestrationSection) -> None:
    """Refuse (``KoboiError``, one line) an agent that asks for more than its parent."""
    for index, agent in enumerate(section.agents):
        problem = _problem(config, agent)
        if problem is not None:
            raise KoboiError(
                f"orchestration.agents[{index}] ({agent.name}): {problem}; a sub-agent gets at "
                "most what its parent has"
            )


def _problem(config: AgentConfig, agent: AgentDef) -> str | None:
    parent = config.agent
    if agent.tools is not None:
        enabled = list(config.tools.builtin)
        missing = [t for t in agent.tools if t not in enabled]
        if missing:
            shown = ", ".join(enabled) or "none"
            return (
                f"tool {', '.join(repr(t) for t in missing)} is not one of the parent's tools "
                f"(tools.builtin: {shown})"
            )
    if agent.mode is not None and not mode_within(agent.mode, parent.mode):
        order = " < ".join(MODE_ORDER)
        return (
            f"mode '{agent.mode}' is wider than the parent's agent.mode '{parent.mode}' ({order})"
        )
    if agent.sandbox is not None and agent.sandbox != config.sandbox.backend:
        return (
            f"sandbox '{agent.sandbox}' is not the parent's sandbox.backend "
            f"'{config.sandbox.backend}' (a sub-agent runs in its parent's sandbox)"
        )
    if agent.llm is not None and agent.llm not in config.providers:
        known = ", ".join(sorted(config.providers)) or "none"
        return f"llm '{agent.llm}' is not an entry of the providers section (entries: {known})"
    if agent.max_iterations is not None and agent.max_iterations > parent.max_iterations:
        return (
            f"max_iterations {agent.max_iterations} is more than the parent's "
            f"agent.max_iterations {parent.max_iterations}"
        )
    return None


def child_options(agent: AgentDef) -> dict[str, object]:
    """What ``RunHandle.child`` / ``ctx.run_subagent`` are given for ``agent``."""
    options: dict[str, object] = {"name": agent.name}
    if agent.system_prompt:
        options["system_prompt"] = agent.system_prompt
    for key in ("tools", "mode", "max_iterations", "max_total_tokens", "max_cost_usd"):
        value = getattr(agent, key)
        if value is not None:
            options[key] = value
    if agent.llm is not None:
        options["model"] = agent.llm
    return options
