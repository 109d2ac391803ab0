"""The ``mcp-serve:`` config section: what ``koboi mcp-serve`` exposes by default.

The command's flags add to it (``--allow``) or override it (``--allow-all``,
``--ask-agent``, ``--host``, ``--port``). Only pydantic here: the section is
registered while plugins load.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class McpServeSettings(BaseModel):
    """The ``mcp-serve`` section: the agent's tools as an MCP server."""

    model_config = ConfigDict(extra="forbid")

    allow: list[str] = Field(
        default_factory=list,
        description="Moderate or destructive tools exposed besides the safe ones (by name). "
        "Exposing a tool approves nothing: its calls are governed as any.",
    )
    allow_all: bool = Field(default=False, description="Expose every tool (still governed).")
    ask_agent: bool = Field(
        default=False,
        description="Also expose the agent itself as one tool, ask_<agent name>: each call is "
        "a run of the agent in a journaled session of its own.",
    )
    host: str = Field(default="127.0.0.1", description="HTTP: the address to listen on.")
    port: int = Field(default=8765, ge=1, le=65535, description="HTTP: the port to listen on.")
