"""koboi hooks of koboi-mcp-serve: the ``koboi mcp-serve`` command and its section.

The command's module (the MCP SDK, uvicorn) is named by a string and imported
only when the command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.hookspecs import RegisterCommand, RegisterConfigSection


@hookimpl
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    from koboi_mcp_serve.config import McpServeSettings

    register(
        "mcp-serve",
        McpServeSettings,
        description="What koboi mcp-serve exposes: tools besides the safe ones, ask_<agent>.",
    )


@hookimpl
def koboi_register_commands(register: RegisterCommand) -> None:
    register(
        "mcp-serve",
        "koboi_mcp_serve.cli:serve",
        help="Serve an agent's tools over MCP (stdio, or streamable HTTP with API keys).",
    )
