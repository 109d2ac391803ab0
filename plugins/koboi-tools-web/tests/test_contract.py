"""web_fetch and web_search pass the tool contract every tool plugin must pass."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from koboi import AgentConfig
from koboi.tools import Tool
from koboi_testing.contracts import ToolContract
from koboi_testing.wire import Reply, WireServer
from koboi_tools_web.tools import make_fetch_tool, make_search_tool


@pytest.fixture
def page_server() -> Iterator[WireServer]:
    with WireServer() as server:
        server.default = Reply.raw("<title>Contract</title><p>hello</p>", content_type="text/html")
        yield server


class TestWebFetchContract(ToolContract):
    @pytest.fixture
    def tool(self, configure: Callable[..., AgentConfig]) -> Tool:
        # The contract really runs the tool: against a loopback page, allowed explicitly.
        return make_fetch_tool(configure({"allow_hosts": ["127.0.0.1"]}))

    @pytest.fixture
    def valid_arguments(self, page_server: WireServer) -> Mapping[str, Any]:
        return {"url": page_server.url + "/page", "max_chars": 1000}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [
            {},
            {"url": 42},
            {"url": ""},
            {"url": "https://x.test/" + "a" * 9000},
            {"url": "https://x.test/", "max_chars": 10},
            {"url": "https://x.test/", "max_chars": 10_000_000},
            {"url": "https://x.test/", "max_chars": "many"},
        ]


class TestWebSearchOfflineContract(ToolContract):
    @pytest.fixture
    def tool(self, configure: Callable[..., AgentConfig]) -> Tool:
        return make_search_tool(configure())

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"query": "koboi agents", "max_results": 3}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [
            {},
            {"query": 7},
            {"query": ""},
            {"query": "q" * 401},
            {"query": "x", "max_results": 0},
            {"query": "x", "max_results": 11},
        ]


class TestWebSearchBraveContract(ToolContract):
    @pytest.fixture
    def tool(self, configure: Callable[..., AgentConfig], page_server: WireServer) -> Tool:
        page_server.default = Reply.json({"web": {"results": [{"url": "https://a.test/"}]}})
        return make_search_tool(
            configure(
                {
                    "search": {
                        "backend": "brave",
                        "base_url": page_server.url,
                        "api_key": "contract-key-0123456789",
                    }
                }
            )
        )

    @pytest.fixture
    def valid_arguments(self) -> Mapping[str, Any]:
        return {"query": "koboi"}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"query": ""}, {"query": "x", "max_results": 99}]
