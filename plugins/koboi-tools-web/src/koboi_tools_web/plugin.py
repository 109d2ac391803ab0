"""koboi hooks of koboi-tools-web.

Only ``@hookimpl`` functions here: the config model (pydantic), httpx and the
tools are imported when asked for, so `koboi --help` loads none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.tools import Tool

SECTION = "tools_web"


@hookimpl
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    from koboi_tools_web import aliases
    from koboi_tools_web.config import WebSettings

    register(
        SECTION,
        WebSettings,
        description="Web tools: web_fetch limits and intranet allow-list, web_search backend.",
        # koboi-agent's spelling: accepted, and `koboi validate --suggest` shows koboi's.
        aliases={"websearch": aliases.websearch},
    )


def create_fetch_tool(config: AgentConfig) -> Tool:
    """Tool factory of ``web_fetch``: called once per agent, with its validated config."""
    from koboi_tools_web.tools import make_fetch_tool

    return make_fetch_tool(config)


def create_search_tool(config: AgentConfig) -> Tool:
    """Tool factory of ``web_search``: the backend comes from ``tools_web.search``."""
    from koboi_tools_web.tools import make_search_tool

    return make_search_tool(config)


@hookimpl
def koboi_register_tools(register: Callable[..., None]) -> None:
    register(
        "web_fetch",
        create_fetch_tool,
        description="Fetch a public http(s) URL as readable text (SSRF-guarded, capped).",
    )
    register(
        "web_search",
        create_search_tool,
        description="Search the web through the configured backend (offline by default).",
    )
