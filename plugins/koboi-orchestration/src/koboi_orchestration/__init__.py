"""koboi-orchestration: many agents, one journal.

Routers (keyword, LLM, hybrid), sequential / parallel / DAG / conditional /
planned runs of sub-agents (the runner ``orchestration``), sub-agents as
tools (``run_subagent``, ``ask__<agent>``, :func:`agent_tool`), and ``koboi
graph``. Importing this package (which the plugin host does at start-up) costs
nothing: every module is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_orchestration._version import __version__
    from koboi_orchestration.config import AgentDef, OrchestrationSection
    from koboi_orchestration.runner import OrchestrationRunner
    from koboi_orchestration.tools import agent_tool

__all__ = ["AgentDef", "OrchestrationRunner", "OrchestrationSection", "__version__", "agent_tool"]

_LAZY = {
    "__version__": "koboi_orchestration._version",
    "AgentDef": "koboi_orchestration.config",
    "OrchestrationSection": "koboi_orchestration.config",
    "OrchestrationRunner": "koboi_orchestration.runner",
    "agent_tool": "koboi_orchestration.tools",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
