"""web_fetch and web_search go through koboi-http's request hooks; the run's trace id
reaches no site web_fetch is pointed at unless the config trusts it.

Real runs (the scripted model calls the tool), against loopback servers.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import koboi_http.plugin
from koboi import KoboiAgent, PluginHost
from koboi.approval import AllowAllApprover
from koboi.hookspecs import hookimpl
from koboi.store import InMemoryStore
from koboi.tracing import TraceContext
from koboi_http import RequestHook
from koboi_http.hooks import OutboundRequest
from koboi_testing.wire import Reply, WireServer

pytestmark = pytest.mark.anyio

PARENT = TraceContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


class Tagger(RequestHook):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.statuses: list[int] = []

    def on_request(self, request: OutboundRequest) -> None:
        self.seen.append((request.peer, request.host))
        request.headers["x-tenant"] = "blue"

    def on_response(
        self, request: OutboundRequest, response: httpx.Response, seconds: float
    ) -> None:
        self.statuses.append(response.status_code)


class TaggerPlugin:
    def __init__(self, hook: RequestHook) -> None:
        self.hook = hook

    @hookimpl
    def koboi_http_register_request_hooks(self, register: Any) -> None:
        register("tagger", self.hook)


@pytest.fixture
def tagger(host: PluginHost) -> Tagger:
    """The conftest host (scripted, tools-web) plus koboi-http's plugin and a tagging hook."""
    hook = Tagger()
    host.add_plugin(koboi_http.plugin, "http", dist="koboi-http")
    host.add_plugin(TaggerPlugin(hook), "tagger")
    return hook


def agent(host: PluginHost, tool: str, arguments: dict[str, Any], **sections: Any) -> KoboiAgent:
    raw: dict[str, Any] = {
        "llm": {
            "provider": "scripted",
            "script": [{"tool_calls": [{"name": tool, "arguments": arguments}]}, "done"],
        },
        "agent": {"stream": False},
        "tools": {"builtin": ["web_fetch", "web_search"]},
        **sections,
    }
    return KoboiAgent.from_dict(raw, host=host, store=InMemoryStore(), approver=AllowAllApprover())


async def fetch_in_a_run(host: PluginHost, url: str, **sections: Any) -> None:
    async with agent(host, "web_fetch", {"url": url}, **sections) as running:
        result = await running.run("fetch it", trace=PARENT)
    assert result.ok and result.output == "done", result


async def test_a_hook_adds_a_header_to_web_fetch_and_sees_its_response(
    host: PluginHost, tagger: Tagger, wire: WireServer
) -> None:
    wire.push(Reply.raw("", status=302, headers={"location": "/final"}))
    wire.default = Reply.raw("<title>t</title><p>hello</p>", content_type="text/html")
    await fetch_in_a_run(host, wire.url + "/start", tools_web={"allow_hosts": ["127.0.0.1"]})
    assert [r.path for r in wire.requests] == ["/start", "/final"]  # every hop
    assert [r.headers["x-tenant"] for r in wire.requests] == ["blue", "blue"]
    assert tagger.seen == [("fetch", "127.0.0.1")] * 2
    assert tagger.statuses == [302, 200]


async def test_web_fetch_targets_never_get_the_trace_by_default(
    host: PluginHost, tagger: Tagger, wire: WireServer
) -> None:
    wire.default = Reply.raw("plain", content_type="text/plain")
    await fetch_in_a_run(host, wire.url + "/page", tools_web={"allow_hosts": ["127.0.0.1"]})
    (received,) = wire.requests
    assert "traceparent" not in received.headers and "tracestate" not in received.headers
    assert received.headers["x-tenant"] == "blue"  # the hooks ran all the same


async def test_a_trusted_host_gets_the_trace_from_web_fetch(
    host: PluginHost, tagger: Tagger, wire: WireServer
) -> None:
    wire.default = Reply.raw("plain", content_type="text/plain")
    await fetch_in_a_run(
        host,
        wire.url + "/page",
        tools_web={"allow_hosts": ["127.0.0.1"]},
        http={"trace_hosts": ["127.0.0.1"]},
    )
    (received,) = wire.requests
    sent = TraceContext.parse(received.headers["traceparent"])
    assert sent is not None and sent.trace_id == PARENT.trace_id
    assert sent.span_id != PARENT.span_id


async def test_web_search_requests_go_through_the_hooks(
    host: PluginHost, tagger: Tagger, wire: WireServer
) -> None:
    wire.default = Reply.raw("<html><body></body></html>", content_type="text/html")
    search = {"search": {"backend": "duckduckgo", "base_url": wire.url}}
    async with agent(host, "web_search", {"query": "koboi"}, tools_web=search) as running:
        result = await running.run("search", trace=PARENT)
    assert result.ok and result.output == "done", result
    (received,) = wire.requests
    assert received.headers["x-tenant"] == "blue"
    assert tagger.seen == [("search", "127.0.0.1")]
    assert "traceparent" not in received.headers  # search backends are not trusted by default
