"""koboi hooks of koboi-research.

Only ``@hookimpl`` functions and the factory they name: the config model and
the runner are imported when first used, so `koboi --help` loads neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.hookspecs import RegisterConfigSection, RegisterEventSummary, RegisterRunner
    from koboi.runners import Runner


@hookimpl
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    from koboi_research.config import ResearchSection

    register(
        "research",
        ResearchSection,
        description="Deep research: limits, the search and fetch tools, the report.",
    )


def create_runner(options: Any, config: AgentConfig) -> Runner:
    from koboi_research.runner import create_runner

    return create_runner(options, config)


@hookimpl
def koboi_register_runners(register: RegisterRunner) -> None:
    register(
        "deep_research",
        create_runner,
        description="Plan, search, fetch, extract, a coverage gate, a report citing its sources.",
    )


@hookimpl
def koboi_register_event_summaries(register: RegisterEventSummary) -> None:
    register(
        "koboi_research.summaries:summarize",
        description="research events (searches, sources, coverage) in one line",
    )
