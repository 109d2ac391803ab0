"""Request hooks and W3C trace propagation, against real HTTP servers on 127.0.0.1.

Each test builds its own plugin host (koboi-http's plugin, a provider plugin, and
plugins that register request hooks) and checks what the server received: the
headers a hook added, the ``traceparent`` of a run, nothing outside a run.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import entry_points
from typing import Any

import httpx
import pytest

import koboi_http
import koboi_http.plugin
from koboi import KoboiAgent
from koboi.config import AgentConfig, validate_config
from koboi.errors import ConfigError, PluginError, ProviderError
from koboi.hookspecs import hookimpl
from koboi.interceptors import RunInfo
from koboi.messages import Message, ModelRequest, ModelResponse, ModelStreamEvent
from koboi.plugins import PluginHost, use_host
from koboi.store import InMemoryStore
from koboi.tracing import TraceContext, running
from koboi_http import HTTPProvider, HTTPProviderOptions, RequestHook, SSEEvent, hook_failures
from koboi_http.guard import AddressPolicy
from koboi_http.hooks import OutboundRequest
from koboi_http.hookspecs import REGISTER_REQUEST_HOOKS
from koboi_http.outbound import client, hooks_for
from koboi_http.pinning import pin, pinned_client, send_pinned
from koboi_http.settings import HTTPSettings
from koboi_testing.wire import Reply, WireServer

pytestmark = pytest.mark.anyio

PARENT = TraceContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "01", "vendor=abc")


# -- a minimal provider over HTTPProvider, and plugins -------------------------------------


class PingOptions(HTTPProviderOptions):
    api_key_required = False


class Ping(HTTPProvider[PingOptions]):
    """POST /chat -> {"text": ...}."""

    name = "ping"

    def endpoint(self, request: ModelRequest, *, stream: bool) -> str:
        return "chat"

    def auth_headers(self) -> dict[str, str]:
        return {}

    def build_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        return {"input": request.messages[-1].content}

    def parse_response(self, body: Any) -> ModelResponse:
        return ModelResponse(message=Message.assistant(str(body["text"])))

    async def parse_stream(
        self, events: AsyncIterator[SSEEvent]
    ) -> AsyncIterator[ModelStreamEvent]:
        raise ProviderError("ping does not stream")
        yield  # pragma: no cover


class PingPlugin:
    @hookimpl
    def koboi_register_providers(self, register: Any) -> None:
        register("ping", Ping, options=PingOptions)


class Recorder(RequestHook):
    """Adds ``x-koboi-test: <value>`` and keeps what it saw."""

    def __init__(self, value: str = "added", log: list[str] | None = None) -> None:
        self.value = value
        self.requests: list[OutboundRequest] = []
        self.responses: list[tuple[OutboundRequest, int, float]] = []
        self.log = log if log is not None else []

    def on_request(self, request: OutboundRequest) -> None:
        self.requests.append(request)
        self.log.append(f"request:{self.value}")
        request.headers["x-koboi-test"] = self.value

    def on_response(
        self, request: OutboundRequest, response: httpx.Response, seconds: float
    ) -> None:
        self.responses.append((request, response.status_code, seconds))
        self.log.append(f"response:{self.value}")


class HookPlugin:
    """A plugin registering the request hooks it is given (counting its collections)."""

    def __init__(self, **hooks: object) -> None:
        self.hooks = hooks
        self.collections = 0

    @hookimpl
    def koboi_http_register_request_hooks(self, register: Any) -> None:
        self.collections += 1
        for name, hook in self.hooks.items():
            register(name, hook, description=f"test hook {name}")


def make_host(*plugins: tuple[str, object], http: bool = True, strict: bool = True) -> PluginHost:
    host = PluginHost(load_entry_points=False, strict=strict)
    if http:
        host.add_plugin(koboi_http.plugin, "http", dist="koboi-http")
    host.add_plugin(PingPlugin(), "ping")
    for name, plugin in plugins:
        host.add_plugin(plugin, name)
    host.load()
    return host


def ping(server: WireServer, **options: Any) -> Ping:
    return Ping(PingOptions(model="m", base_url=server.url, max_retries=0, **options))


def config(host: PluginHost, server: WireServer, http: dict[str, Any] | None = None) -> AgentConfig:
    raw: dict[str, Any] = {
        "llm": {"provider": "ping", "model": "m", "base_url": server.url, "max_retries": 0},
        "agent": {"stream": False},
    }
    if http is not None:
        raw["http"] = http
    return validate_config(raw, host.catalog())


def run_info(host: PluginHost, cfg: AgentConfig, trace: TraceContext | None = PARENT) -> RunInfo:
    """The run a request is made for, as the loop makes it current (``koboi.tracing.running``)."""
    return RunInfo(session_id="s", step=1, config=cfg, trace=trace, host=host)


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer() as wire:
        wire.default = Reply.json({"text": "pong"})
        yield wire


def span_of(traceparent: str) -> TraceContext:
    parsed = TraceContext.parse(traceparent)
    assert parsed is not None, traceparent
    return parsed


# -- the plugin and its hook ---------------------------------------------------------------


def test_koboi_http_is_the_plugin_http_defining_the_request_hook() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "http"]
    assert ep.value == "koboi_http.plugin"
    host = make_host(("hooks", HookPlugin()))
    info = host.get("http")
    assert info is not None and info.status == "loaded"
    assert info.defines == [REGISTER_REQUEST_HOOKS]
    assert host.hook_owner(REGISTER_REQUEST_HOOKS) == "http"
    assert host.catalog().sections.get("http") is not None


def test_importing_the_plugin_and_the_hook_types_does_not_import_httpx() -> None:
    code = (
        "import sys, koboi_http.plugin, koboi_http.hooks, koboi_http.hookspecs, "
        "koboi_http.settings; print('httpx' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# -- hooks on a provider call --------------------------------------------------------------


async def test_a_hook_adds_a_header_the_provider_receives(server: WireServer) -> None:
    recorder = Recorder()
    host = make_host(("hooks", HookPlugin(tagger=recorder)))
    provider = ping(server)
    with use_host(host):
        response = await provider.complete(ModelRequest(messages=[Message.user("hi")]))
    await provider.aclose()
    assert response.message.content == "pong"
    (received,) = server.requests
    assert received.headers["x-koboi-test"] == "added"
    (seen,) = recorder.requests
    assert seen.peer == "provider" and seen.method == "POST" and seen.host == "127.0.0.1"
    assert seen.run is None and seen.trace is None


async def test_hooks_observe_every_response_and_attempt(server: WireServer) -> None:
    recorder = Recorder()
    host = make_host(("hooks", HookPlugin(observer=recorder)))
    server.push(Reply.json({"error": {"message": "busy"}}, status=503))
    provider = Ping(
        PingOptions(model="m", base_url=server.url, max_retries=1, retry_initial_delay=0)
    )
    with use_host(host):
        await provider.complete(ModelRequest(messages=[Message.user("hi")]))
    await provider.aclose()
    assert [status for _, status, _ in recorder.responses] == [503, 200]
    # The same request object each time, and a new one per attempt.
    assert [r for r, _, _ in recorder.responses] == recorder.requests
    assert recorder.requests[0] is not recorder.requests[1]
    assert all(0 < seconds < 10 for _, _, seconds in recorder.responses)


async def test_a_hook_that_raises_does_not_break_the_request(
    server: WireServer, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(RequestHook):
        def on_request(self, request: OutboundRequest) -> None:
            raise RuntimeError("hook bug")

        def on_response(
            self, request: OutboundRequest, response: httpx.Response, seconds: float
        ) -> None:
            raise ValueError("observer bug")

    recorder = Recorder()
    host = make_host(("a-broken", HookPlugin(broken=Broken())), ("b-fine", HookPlugin(ok=recorder)))
    before = hook_failures().get("broken", 0)
    provider = ping(server)
    with use_host(host), caplog.at_level(logging.DEBUG, logger="koboi_http.hooks"):
        for _ in range(2):
            response = await provider.complete(ModelRequest(messages=[Message.user("hi")]))
            assert response.message.content == "pong"
    await provider.aclose()
    # The other hook still ran, before and after the broken one.
    assert [r.headers["x-koboi-test"] for r in server.requests] == ["added", "added"]
    assert len(recorder.responses) == 2
    assert hook_failures()["broken"] - before == 4
    records = [r for r in caplog.records if "'broken'" in r.getMessage()]
    warnings = [r for r in records if r.levelno == logging.WARNING]
    assert len(records) == 4 and len(warnings) == 2  # once per method, then at debug level
    text = warnings[0].getMessage()
    assert "plugin 'a-broken'" in text and "on_request" in text and "RuntimeError: hook bug" in text
    assert "POST 127.0.0.1" in text and "/chat" not in text  # the host, never the path


async def test_hooks_are_collected_once_per_host_and_again_when_its_plugins_change(
    server: WireServer,
) -> None:
    first = HookPlugin(one=Recorder("one"))
    host = make_host(("first", first))
    provider = ping(server)
    with use_host(host):
        for _ in range(3):
            await provider.complete(ModelRequest(messages=[Message.user("hi")]))
        assert first.collections == 1
        host.add_plugin(HookPlugin(two=Recorder("two")), "second")
        await provider.complete(ModelRequest(messages=[Message.user("hi")]))
    await provider.aclose()
    assert first.collections == 2
    assert [h.name for h in hooks_for(run_info(host, config(host, server)))] == [
        "one",
        "two",
        "trace_propagation",
    ]
    assert server.requests[-1].headers["x-koboi-test"] == "two"  # ran last, after "one"


async def test_hooks_run_in_plugin_order_with_the_trace_hook_last(server: WireServer) -> None:
    log: list[str] = []

    class OwnTrace(RequestHook):
        """A tracing plugin that sends spans of its own."""

        def on_request(self, request: OutboundRequest) -> None:
            log.append("request:own-trace")
            request.headers["traceparent"] = f"00-{PARENT.trace_id}-{'1' * 16}-01"

    host = make_host(
        ("zeta", HookPlugin(z=Recorder("z", log))),
        ("alpha", HookPlugin(a=Recorder("a", log), tracer=OwnTrace())),
    )
    cfg = config(host, server)
    async with client(peer="provider") as http:
        with running(run_info(host, cfg)):
            await http.get(server.url + "/x")
    assert log == ["request:a", "request:own-trace", "request:z", "response:a", "response:z"]
    (received,) = server.requests
    assert received.headers["traceparent"] == f"00-{PARENT.trace_id}-{'1' * 16}-01"
    assert received.headers["x-koboi-test"] == "z"


def test_a_registration_that_is_not_a_request_hook_is_refused() -> None:
    class AsyncHook(RequestHook):
        async def on_request(self, request: OutboundRequest) -> None:  # type: ignore[override]
            pass

    strict = make_host(("bad", HookPlugin(thing=object())))
    with use_host(strict), pytest.raises(PluginError, match=r"not a koboi_http\.RequestHook"):
        hooks_for()

    lenient = make_host(
        ("bad", HookPlugin(slow=AsyncHook())), ("good", HookPlugin(ok=Recorder())), strict=False
    )
    with use_host(lenient):
        hooks = hooks_for()
    assert [h.name for h in hooks] == ["ok", "trace_propagation"]
    info = lenient.get("bad")
    assert info is not None and info.status == "failed"
    assert "on_request is async" in info.reason


async def test_two_plugins_registering_one_name_are_both_named(server: WireServer) -> None:
    host = make_host(
        ("one", HookPlugin(same=Recorder())), ("two", HookPlugin(same=Recorder())), strict=False
    )
    hooks = hooks_for(run_info(host, config(host, server)))
    assert [(h.name, h.plugin) for h in hooks] == [
        ("same", "one"),
        ("trace_propagation", "http"),
    ]
    info = host.get("two")
    assert info is not None and "'one' and 'two'" in info.reason


async def test_without_the_http_plugin_no_hook_runs_and_requests_work(
    server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KOBOI_DISABLE_PLUGINS", "http")
    recorder = Recorder()
    host = PluginHost(strict=True)  # every installed plugin, but not http
    host.add_plugin(HookPlugin(tagger=recorder), "hooks")
    host.add_plugin(PingPlugin(), "ping")
    host.load()
    http_info, hooks_info = host.get("http"), host.get("hooks")
    assert http_info is not None and http_info.status == "disabled"
    assert hooks_info is not None and hooks_info.waiting == [REGISTER_REQUEST_HOOKS]
    assert host.hook_owner(REGISTER_REQUEST_HOOKS) is None
    provider = ping(server)
    cfg = validate_config(
        {"llm": {"provider": "ping", "model": "m", "base_url": server.url}}, host.catalog()
    )
    with use_host(host):
        await provider.complete(ModelRequest(messages=[Message.user("outside")]))
        with running(run_info(host, cfg)):
            await provider.complete(ModelRequest(messages=[Message.user("inside")]))
    await provider.aclose()
    assert recorder.requests == []
    assert all(
        "x-koboi-test" not in r.headers and "traceparent" not in r.headers for r in server.requests
    )
    assert len(server.requests) == 2


# -- trace propagation ---------------------------------------------------------------------


async def test_a_run_sends_its_trace_to_the_provider(server: WireServer) -> None:
    """A real run: the provider's server receives the run's trace id, a new span per call."""
    host = make_host()
    server.push(Reply.json({"text": "one"}), Reply.json({"text": "two"}))
    agent = KoboiAgent(config(host, server), host=host, store=InMemoryStore())
    async with agent:
        first = await agent.run("hi", trace=PARENT)
        second = await agent.run("again", session_id=first.session_id, trace=PARENT)
        third = await agent.run("fresh")
    assert first.output == "one" and second.output == "two" and third.ok
    sent = [span_of(r.headers["traceparent"]) for r in server.requests]
    assert [s.trace_id for s in sent[:2]] == [PARENT.trace_id] * 2
    assert len({PARENT.span_id, *(s.span_id for s in sent)}) == 4  # new span per request
    assert [s.flags for s in sent] == ["01"] * 3
    assert [r.headers.get("tracestate") for r in server.requests[:2]] == ["vendor=abc"] * 2
    # A run given no trace starts its own: still one trace id per run, not the parent's.
    assert sent[2].trace_id != PARENT.trace_id
    assert "tracestate" not in server.requests[2].headers


async def test_no_trace_outside_a_run(server: WireServer) -> None:
    host = make_host()
    provider = ping(server)
    with use_host(host):
        await provider.complete(ModelRequest(messages=[Message.user("hi")]))
    await provider.aclose()
    (received,) = server.requests
    assert "traceparent" not in received.headers and "tracestate" not in received.headers


async def test_a_traceparent_the_request_has_is_kept(server: WireServer) -> None:
    host = make_host()
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    provider = ping(server, headers={"traceparent": own, "tracestate": "mine=1"})
    with running(run_info(host, config(host, server))):
        await provider.complete(ModelRequest(messages=[Message.user("hi")]))
    await provider.aclose()
    (received,) = server.requests
    assert received.headers["traceparent"] == own
    assert received.headers["tracestate"] == "mine=1"


async def test_propagation_can_be_turned_off(server: WireServer) -> None:
    host = make_host()
    provider = ping(server)
    with running(run_info(host, config(host, server, {"propagate_trace": False}))):
        await provider.complete(ModelRequest(messages=[Message.user("hi")]))
    await provider.aclose()
    assert "traceparent" not in server.requests[0].headers


async def test_other_peers_get_the_trace_only_when_trusted(server: WireServer) -> None:
    host = make_host()
    requests: list[tuple[str, dict[str, Any] | None, str]] = [
        ("default", None, "search"),
        ("peer listed", {"trace_peers": ["provider", "search"]}, "search"),
        ("host listed", {"trace_hosts": ["127.0.0.1"]}, "other"),
        ("other host listed", {"trace_hosts": ["*.corp"]}, "other"),
        ("providers removed", {"trace_peers": []}, "provider"),
    ]
    for label, http, peer in requests:
        async with client(peer=peer) as http_client:
            with running(run_info(host, config(host, server, http))):
                await http_client.get(f"{server.url}/{label.replace(' ', '-')}")
    carried = [("traceparent" in r.headers) for r in server.requests]
    assert carried == [False, True, True, False, False]


async def test_a_pinned_client_runs_the_hooks_and_keeps_the_trace_from_webhooks(
    server: WireServer,
) -> None:
    """The webhook path: pin, then send to the checked address, as the server does."""
    recorder = Recorder()
    host = make_host(("hooks", HookPlugin(tagger=recorder)))
    target = await pin(
        httpx.URL(server.url + "/hook"), AddressPolicy(allow_networks=["127.0.0.0/8"])
    )
    for http in (None, {"trace_hosts": ["127.0.0.1"]}):
        async with pinned_client(timeout=5, connect_timeout=5, peer="webhook") as pinned:
            with running(run_info(host, config(host, server, http))):
                response, _ = await send_pinned(pinned, "POST", target, content=b"{}")
                await response.aclose()
    assert [r.headers["x-koboi-test"] for r in server.requests] == ["added", "added"]
    assert [r.peer for r in recorder.requests] == ["webhook", "webhook"]
    assert "traceparent" not in server.requests[0].headers
    assert span_of(server.requests[1].headers["traceparent"]).trace_id == PARENT.trace_id


async def test_a_client_bound_to_a_host_runs_its_hooks_outside_a_run(
    server: WireServer,
) -> None:
    """A server's webhook deliveries run outside any run: they name the host to ask."""
    recorder = Recorder()
    host = make_host(("hooks", HookPlugin(tagger=recorder)))
    other = make_host()
    target = await pin(httpx.URL(server.url + "/hook"), AddressPolicy(allow_hosts=["127.0.0.1"]))
    with use_host(other):  # the default host has no such hook
        async with pinned_client(timeout=5, connect_timeout=5, peer="webhook", host=host) as c:
            response, _ = await send_pinned(c, "POST", target, content=b"{}")
            await response.aclose()
        async with koboi_http.client(peer="other", host=host) as plain:
            await plain.get(server.url + "/plain")
        async with koboi_http.client(peer="other") as unbound:
            await unbound.get(server.url + "/unbound")
    assert [r.headers.get("x-koboi-test") for r in server.requests] == ["added", "added", None]
    assert [r.peer for r in recorder.requests] == ["webhook", "other"]


# -- the config section ----------------------------------------------------------------------


def test_the_http_section_is_validated(server: WireServer) -> None:
    host = make_host()
    cfg = config(host, server, {"trace_hosts": ["Collector.Corp.", "*.Internal", "[::1]"]})
    settings = cfg.section("http")
    assert isinstance(settings, HTTPSettings)
    assert settings.trace_hosts == ["collector.corp", "*.internal", "::1"]
    assert settings.sends_trace_to("fetch", "collector.corp")
    assert settings.sends_trace_to("fetch", "a.b.internal")
    assert settings.sends_trace_to("fetch", "::1")
    assert not settings.sends_trace_to("fetch", "internal.example")
    assert settings.sends_trace_to("provider", "anywhere.example")
    with pytest.raises(ConfigError, match="propagate_trac"):
        config(host, server, {"propagate_traces": True})
    with pytest.raises(ConfigError, match="not a peer name"):
        config(host, server, {"trace_peers": ["Provider!"]})
    with pytest.raises(ConfigError, match="not a host name"):
        config(host, server, {"trace_hosts": ["a..b"]})
