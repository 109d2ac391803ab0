"""The tools ``web_fetch`` and ``web_search``, built per agent from its ``tools_web`` section."""

from __future__ import annotations

import ssl
from typing import Any

import httpx
from pydantic import ConfigDict, Field, create_model

from koboi import AgentConfig
from koboi.tools import Risk, Tool, ToolContext, ToolResult
from koboi_http.guard import Resolver
from koboi_tools_web.config import WebSettings
from koboi_tools_web.fetch import WebFetcher
from koboi_tools_web.search import SearchBackend, make_backend, render_hits

MAX_URL_LENGTH = 8192
MAX_QUERY_LENGTH = 400


def settings_of(config: AgentConfig | WebSettings | None) -> WebSettings:
    """The agent's validated ``tools_web`` section, or the defaults when it has none."""
    if isinstance(config, WebSettings):
        return config
    section = config.section("tools_web") if config is not None else None
    if section is None:
        return WebSettings()
    if not isinstance(section, WebSettings):
        raise TypeError(f"the 'tools_web' section is a {type(section).__name__}")
    return section


class WebFetchTool(Tool):
    """GET a URL and return it as text, under the SSRF guard and the size and time caps."""

    name = "web_fetch"
    # Moderate: it reaches the network with a URL the model chose (and the
    # request itself can carry data out in its URL). Idempotent: one GET, no
    # state of ours changes, so repeating it after a crash is harmless.
    risk = Risk.MODERATE
    idempotent = True

    def __init__(self, fetcher: WebFetcher) -> None:
        self.fetcher = fetcher
        settings = fetcher.settings
        self.description = (
            "Fetch a web page over http or https and return it as readable text: the title, "
            "headings (#), paragraphs, list items and links written as 'text [url]'; scripts "
            "and styles are dropped. JSON, XML and plain text come back as text; images, PDFs "
            "and other binary content are refused. Only public addresses can be reached. "
            f"Reads at most {settings.max_bytes} bytes and returns at most max_chars characters, "
            f"within {settings.timeout:g} seconds."
        )
        self.args_model = create_model(
            "WebFetchArgs",
            __config__=ConfigDict(extra="forbid"),
            url=(
                str,
                Field(
                    min_length=1,
                    max_length=MAX_URL_LENGTH,
                    description="The http(s) URL to fetch, e.g. https://example.org/page.",
                ),
            ),
            max_chars=(
                int,
                Field(
                    default=settings.default_max_chars,
                    ge=100,
                    le=settings.max_chars,
                    description="Most characters of text to return; longer text is cut.",
                ),
            ),
        )

    async def invoke(self, args: Any, ctx: ToolContext) -> ToolResult:
        result = await self.fetcher.fetch(args.url, args.max_chars)
        return ToolResult(
            content=result.render(), is_error=result.status >= 400, data=result.data()
        )


class WebSearchTool(Tool):
    """Ask the configured search backend; the results are titles, URLs and snippets."""

    name = "web_search"
    idempotent = True  # a search changes nothing; repeating it is harmless

    def __init__(self, backend: SearchBackend, max_results: int) -> None:
        self.backend = backend
        # Safe when the query stays on this machine; moderate when it is sent
        # to a third party, since a prompt-injected model could put data in it.
        self.risk = Risk.MODERATE if backend.sends_queries_out else Risk.SAFE
        where = (
            f"the {backend.name} search service"
            if backend.sends_queries_out
            else "an offline index (deterministic; not the live web)"
        )
        self.description = (
            f"Search the web and return the top results (title, URL, snippet), from {where}. "
            "Use web_fetch to read a result."
        )
        self.args_model = create_model(
            "WebSearchArgs",
            __config__=ConfigDict(extra="forbid"),
            query=(
                str,
                Field(
                    min_length=1,
                    max_length=MAX_QUERY_LENGTH,
                    description="What to search for, e.g. 'python asyncio task groups'.",
                ),
            ),
            max_results=(
                int,
                Field(
                    default=min(5, max_results),
                    ge=1,
                    le=max_results,
                    description=f"How many results to return (1 to {max_results}).",
                ),
            ),
        )

    async def invoke(self, args: Any, ctx: ToolContext) -> ToolResult:
        query = " ".join(args.query.split())
        hits = await self.backend.search(query, args.max_results)
        return ToolResult(
            content=render_hits(query, self.backend.name, hits),
            data={"backend": self.backend.name, "results": [h.as_dict() for h in hits]},
        )


def make_fetch_tool(
    config: AgentConfig | WebSettings | None,
    *,
    resolver: Resolver | None = None,
    verify: ssl.SSLContext | bool = True,
    transport: httpx.AsyncBaseTransport | None = None,
) -> WebFetchTool:
    """``web_fetch`` for one agent (the keyword arguments are for tests)."""
    fetcher = WebFetcher(settings_of(config), resolver=resolver, verify=verify, transport=transport)
    return WebFetchTool(fetcher)


def make_search_tool(config: AgentConfig | WebSettings | None) -> WebSearchTool:
    """``web_search`` for one agent, with the backend its config names."""
    settings = settings_of(config)
    return WebSearchTool(
        make_backend(settings.search, settings.user_agent), settings.search.max_results
    )


__all__ = [
    "WebFetchTool",
    "WebSearchTool",
    "make_fetch_tool",
    "make_search_tool",
    "settings_of",
]
