"""koboi hooks of koboi-mcp.

Only ``@hookimpl`` functions here: the config model, the toolset and the MCP
SDK are imported when asked for, so `koboi --help` loads none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.hookspecs import RegisterCommand, RegisterConfigSection, RegisterToolset


@hookimpl
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    from koboi_mcp.config import McpSettings

    register("mcp", McpSettings, description="MCP servers whose tools the agent offers.")


def create_toolset(config: Any) -> Any:
    """Toolset factory: the servers of the config's ``mcp`` section (None without one).
    Every agent asks it, so the SDK (which imports OpenTelemetry, among much else) is
    imported only for a config that has the section."""
    if config.section("mcp") is None:
        return None
    from koboi_mcp.toolset import create_toolset as create

    return create(config)


@hookimpl
def koboi_register_toolsets(register: RegisterToolset) -> None:
    register("mcp", create_toolset, description="The tools of the config's MCP servers.")


@hookimpl
def koboi_register_commands(register: RegisterCommand) -> None:
    register(
        "mcp", "koboi_mcp.cli:app", help="MCP servers of a config: list, tools, login, logout."
    )
