"""Plugins extend koboi serve through ``koboi_server_register_extensions``: their routes go
through the server's authentication and ownership, their collectors reach ``/metrics``
(behind a key, or on a port of its own), and a route that would bypass the key is refused."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from fastapi import Depends, Request
from prometheus_client.parser import text_string_to_metric_families

from koboi.errors import KoboiError
from koboi.hookspecs import hookimpl
from koboi.plugins import PluginHost
from koboi_server.extensions import current_principal

# Real servers (uvicorn in a thread): once, in this member's own session.
pytestmark = pytest.mark.slow


def _plugin(router_paths: dict[str, str] | None = None, public: tuple[str, ...] = ()) -> Any:
    """A plugin whose extension serves ``/v1/mine/sessions/{id}`` (the caller's session) and
    a public card, plus a Prometheus collector."""

    def factory(context: Any) -> Any:
        from fastapi import APIRouter
        from prometheus_client.core import GaugeMetricFamily

        from koboi_server.extensions import ServerExtension, owned_session

        router = APIRouter()
        paths = router_paths or {
            "mine": "/v1/mine/sessions/{session_id}",
            "card": "/.well-known/test-card.json",
        }

        @router.get(paths["mine"])
        async def mine(
            session_id: str,
            request: Request,
            principal: Annotated[Any, Depends(current_principal)],
        ) -> dict[str, Any]:
            info = await owned_session(request, session_id)
            return {"id": info.id, "principal": principal.name, "agent": context.config.agent.name}

        if "card" in paths:

            @router.get(paths["card"])
            async def card() -> dict[str, str]:
                return {"name": context.config.agent.name}

        class Collector:
            def collect(self) -> Any:
                family = GaugeMetricFamily("exttest_answer", "The answer.", labels=["kind"])
                family.add_metric(["test"], 42)
                yield family

        return ServerExtension(router=router, public_paths=public, collectors=[Collector()])

    class ExtTest:
        @hookimpl
        def koboi_server_register_extensions(self, register: Callable[..., None]) -> None:
            register("exttest", factory, description="A test extension.")

    return ExtTest()


def _host(plugin: Any) -> PluginHost:
    host = PluginHost(strict=True)
    host.add_plugin(plugin, "exttest")
    return host


def test_extension_routes_use_the_servers_keys_and_ownership(
    thread_server: Callable[..., Any], make_key: Callable[..., str]
) -> None:
    alice, bob = make_key("alice"), make_key("bob")
    server = thread_server(
        host=_host(_plugin(public=("/.well-known/test-card.json",))),
        settings={"metrics": {"enabled": True}},
    )
    base = server.base_url
    chat = httpx.post(
        f"{base}/v1/chat",
        json={"message": "What is 2 + 2?"},
        headers={"Authorization": f"Bearer {alice}"},
        timeout=30,
    )
    assert chat.status_code == 200, chat.text
    session = chat.json()["session_id"]
    assert chat.json()["usage"]["input_tokens"] > 0

    mine = httpx.get(
        f"{base}/v1/mine/sessions/{session}", headers={"Authorization": f"Bearer {alice}"}
    )
    assert mine.status_code == 200
    assert mine.json() == {"id": session, "principal": "alice", "agent": "served"}
    # Someone else's session answers as one that does not exist; no key is 401.
    theirs = httpx.get(
        f"{base}/v1/mine/sessions/{session}", headers={"Authorization": f"Bearer {bob}"}
    )
    assert theirs.status_code == 404 and theirs.json()["error"]["code"] == "not_found"
    assert httpx.get(f"{base}/v1/mine/sessions/{session}").status_code == 401
    # The declared public path needs no key.
    assert httpx.get(f"{base}/.well-known/test-card.json").json() == {"name": "served"}

    # The session view shows what the session used.
    view = httpx.get(
        f"{base}/v1/sessions/{session}", headers={"Authorization": f"Bearer {alice}"}
    ).json()
    assert view["runs"] == 1 and view["input_tokens"] > 0 and view["output_tokens"] > 0

    # /metrics: behind a key on the API's port; the extension's collector is in it.
    assert httpx.get(f"{base}/metrics").status_code == 401
    scraped = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {bob}"})
    families = {f.name: f for f in text_string_to_metric_families(scraped.text)}
    assert [s.value for s in families["exttest_answer"].samples] == [42]
    routes = {
        s.labels["route"] for s in families["koboi_server_requests"].samples if "route" in s.labels
    }
    assert {"/v1/chat", "/v1/mine/sessions/{session_id}"} <= routes
    assert not any(session in r for r in routes)  # route templates, never ids


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_metrics_on_a_port_of_their_own_need_no_key(thread_server: Callable[..., Any]) -> None:
    port = _port()
    server = thread_server(
        host=_host(_plugin(public=("/.well-known/test-card.json",))),
        settings={"metrics": {"enabled": True, "port": port}},
    )
    assert httpx.get(f"{server.base_url}/metrics").status_code == 404  # not on the API's port
    scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert scraped.status_code == 200
    names = {f.name for f in text_string_to_metric_families(scraped.text)}
    assert {"exttest_answer", "koboi_server_jobs", "koboi_server_runs_active"} <= names


@pytest.mark.parametrize(
    ("paths", "public", "refusal"),
    [
        ({"mine": "/mine/{session_id}"}, (), "outside /v1/"),
        ({"mine": "/v1/chat/{session_id}", "card": "/v1/card"}, ("/v1/card",), "never public"),
        ({"mine": "/v1/sessions/{session_id}"}, (), "already served"),
    ],
)
def test_routes_that_would_bypass_the_key_are_refused(
    config_path: Path, paths: dict[str, str], public: tuple[str, ...], refusal: str
) -> None:
    from koboi_server import create_app

    with pytest.raises(KoboiError, match=refusal):
        create_app(
            config_path, host=_host(_plugin(paths, public)), settings={"shared_sandbox": True}
        )


def _runner_plugin() -> Any:
    """A plugin whose extension runs chats itself (``start_chat``, ``run_stream``) and answers
    errors on its routes in its own shape (``error_body``)."""

    def factory(context: Any) -> Any:
        from fastapi import APIRouter
        from fastapi.responses import StreamingResponse

        from koboi_server.errors import ApiError
        from koboi_server.extensions import ServerExtension, run_stream, server_state, start_chat

        router = APIRouter()

        @router.post("/v1/ask/{text}")
        async def ask(text: str, request: Request) -> Any:
            if text == "refuse":
                raise ApiError(418, "refused_here", "asked to refuse")
            info, active = await start_chat(request, text)
            await active.done.wait()
            assert active.result is not None
            return {
                "session": info.id,
                "output": active.result.output,
                "running": info.id in server_state(request).registry.runs,
            }

        @router.post("/v1/ask-stream/{text}")
        async def ask_stream(text: str, request: Request) -> StreamingResponse:
            info, _ = await start_chat(request, text)
            stream = run_stream(request, info, after=info.last_seq)
            return StreamingResponse(stream.frames(), media_type="text/event-stream")

        def shape(error: ApiError) -> dict[str, Any]:
            return {"problem": {"status": error.status, "what": error.code}}

        return ServerExtension(router=router, error_body=shape)

    class Runner:
        @hookimpl
        def koboi_server_register_extensions(self, register: Callable[..., None]) -> None:
            register("runner", factory, description="Runs chats through the seams.")

    return Runner()


def test_an_extension_runs_chats_and_shapes_its_errors(
    thread_server: Callable[..., Any], make_key: Callable[..., str]
) -> None:
    alice = make_key("alice")
    host = PluginHost(strict=True)
    host.add_plugin(_runner_plugin(), "runner")
    base = thread_server(host=host).base_url
    auth = {"Authorization": f"Bearer {alice}"}
    asked = httpx.post(f"{base}/v1/ask/What is 2 + 3?", headers=auth, timeout=30)
    assert asked.status_code == 200, asked.text
    body = asked.json()
    assert body["output"] == "2 + 3 = 5" and body["running"] is False
    # The run is the caller's session, as a chat of /v1/chat is.
    view = httpx.get(f"{base}/v1/sessions/{body['session']}", headers=auth)
    assert view.status_code == 200 and view.json()["runs"] == 1
    with httpx.stream(
        "POST", f"{base}/v1/ask-stream/What is 1 + 1?", headers=auth, timeout=30
    ) as response:
        names = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
    assert names[0] == "run_started" and names[-1] == "final"
    # Errors on the extension's routes have its shape: its own, and the server's (no key)...
    refused = httpx.post(f"{base}/v1/ask/refuse", headers=auth)
    assert refused.status_code == 418
    assert refused.json() == {"problem": {"status": 418, "what": "refused_here"}}
    anonymous = httpx.post(f"{base}/v1/ask/anything")
    assert anonymous.status_code == 401
    assert anonymous.json() == {"problem": {"status": 401, "what": "unauthorized"}}
    # ...and everywhere else koboi's envelope stays.
    elsewhere = httpx.post(f"{base}/v1/chat", json={"message": "hi"})
    assert elsewhere.json()["error"]["code"] == "unauthorized"
