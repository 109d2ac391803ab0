"""``koboi graph CONFIG [--format mermaid|json]``: the orchestration graph of a config."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

from koboi_cli.api import CliError, ConfigArgument, get_host, print_json, write

graph_app = typer.Typer(add_completion=False, rich_markup_mode=None)


class Format(StrEnum):
    mermaid = "mermaid"
    json = "json"


@graph_app.command("graph")
def graph(
    config: ConfigArgument,
    format: Annotated[
        Format, typer.Option("--format", "-f", help="mermaid (graph TD) or json.")
    ] = Format.mermaid,
) -> None:
    """Draw the orchestration graph of CONFIG: its agents and the edges between them.

    Sequential mode draws a chain, parallel mode no edges, dag and conditional
    modes their depends_on and conditional edges (labelled with their test), a
    router a node of its own; dynamic mode's graph is planned at run time, so only
    the agents are drawn.
    """
    from koboi.config import load_config
    from koboi_orchestration.assembly import section_of

    loaded = load_config(config, get_host().catalog())
    section = section_of(loaded)
    if section is None:
        raise CliError(f"{config} has no orchestration section: nothing to draw")
    data = describe(section)
    if format is Format.json:
        print_json(data)
        return
    write(sys.stdout, mermaid(section))


def _graph_of(section: Any) -> Any:
    from koboi_orchestration.graph import Graph

    mode = section.execution.mode
    if mode == "sequential":
        return Graph.chain(section.agents)
    if mode in ("dag", "conditional"):
        return Graph.from_agents(section.agents)
    return Graph.side_by_side(section.agents)


def describe(section: Any) -> dict[str, Any]:
    """The JSON of ``koboi graph --format json``: nothing of the section left out."""
    return {
        "execution_mode": section.execution.mode,
        "execution": section.execution.model_dump(),
        "router": section.router.model_dump() if section.router is not None else None,
        **_graph_of(section).to_data(),
        "planned_at_run_time": section.execution.mode in ("dynamic", "deep_research"),
        "agents": [a.model_dump(exclude_defaults=True) for a in section.agents],
    }


def mermaid(section: Any) -> str:
    router = section.router.type if section.router is not None else None
    return str(_graph_of(section).mermaid(router=router))
