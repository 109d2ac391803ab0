"""Keys carry scopes; routes require one. The server's own routes need ``api`` (the
whole API); an extension declares the scope of its routes. A key limited to another
scope calls those routes and nothing else (403 ``insufficient_scope``). A key may carry
its own rate limit (429 ``rate_limited``) and budget (402 ``budget_exhausted``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import httpx
import pytest
from fastapi import Depends

from koboi.errors import KoboiError
from koboi.hookspecs import hookimpl
from koboi.plugins import PluginHost
from koboi_server.extensions import current_principal

pytestmark = pytest.mark.slow


def _host(scope: str) -> PluginHost:
    def factory(context: Any) -> Any:
        from fastapi import APIRouter

        from koboi_server.extensions import ServerExtension

        router = APIRouter()

        @router.post("/v1/ping/{name}")
        async def ping(name: str, principal: Annotated[Any, Depends(current_principal)]) -> Any:
            return {"pong": name, "principal": principal.name, "scopes": list(principal.scopes)}

        return ServerExtension(router=router, scope=scope)

    class Scoped:
        @hookimpl
        def koboi_server_register_extensions(self, register: Callable[..., None]) -> None:
            register("scoped", factory, description="A route of scope 'invoke'.")

    host = PluginHost(strict=True)
    host.add_plugin(Scoped(), "scoped")
    return host


def _key(config: Path, principal: str, **options: Any) -> str:
    from koboi_cli.api import open_store, store_target
    from koboi_server import KeyRing

    async def main() -> str:
        async with open_store(store_target(config)) as store:
            _, token = await KeyRing(store).create(principal, **options)
            return token

    return anyio.run(main)


def test_a_key_of_one_scope_calls_only_the_routes_of_that_scope(
    thread_server: Callable[..., Any], config_path: Path
) -> None:
    full = _key(config_path, "ops")
    narrow = _key(config_path, "peer", scopes=["invoke"])
    server = thread_server(host=_host("invoke"))
    base = server.base_url

    def call(key: str, method: str, path: str) -> httpx.Response:
        return httpx.request(
            method, base + path, headers={"Authorization": f"Bearer {key}"}, json={}, timeout=30
        )

    pinged = call(narrow, "POST", "/v1/ping/x")
    assert pinged.status_code == 200
    assert pinged.json() == {"pong": "x", "principal": "peer", "scopes": ["invoke"]}
    assert call(full, "POST", "/v1/ping/y").status_code == 200  # api has every scope
    for method, path in [("GET", "/v1/sessions"), ("GET", "/v1/jobs"), ("POST", "/v1/chat")]:
        refused = call(narrow, method, path)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "insufficient_scope"
        assert "needs scope 'api'" in refused.json()["error"]["message"]
    assert call(full, "GET", "/v1/sessions").status_code == 200


def test_a_key_has_its_own_rate_limit_and_budget(
    thread_server: Callable[..., Any], config_path: Path
) -> None:
    hasty = _key(config_path, "hasty", rate_per_minute=2)
    broke = _key(config_path, "broke", budget_usd=0.0)
    server = thread_server()
    headers = {"Authorization": f"Bearer {hasty}"}
    codes = [
        httpx.get(server.base_url + "/v1/sessions", headers=headers, timeout=30).status_code
        for _ in range(3)
    ]
    assert codes == [200, 200, 429]
    chat = httpx.post(
        server.base_url + "/v1/chat",
        json={"message": "What is 1 + 1?"},
        headers={"Authorization": f"Bearer {broke}"},
        timeout=30,
    )
    assert chat.status_code == 402 and chat.json()["error"]["code"] == "budget_exhausted"


def test_bad_scopes_are_refused_in_one_line(
    thread_server: Callable[..., Any], config_path: Path
) -> None:
    with pytest.raises(KoboiError, match="not a valid name"):
        _key(config_path, "x", scopes=["Not Valid"])
    with pytest.raises(KoboiError, match="at least one scope"):
        _key(config_path, "x", scopes=[])
    # An extension's scope is checked when the app is built: it is not built.
    with pytest.raises(KoboiError, match="extension 'scoped' of plugin 'scoped': scope 'BAD'"):
        thread_server(host=_host("BAD"))


def test_keys_create_peer_makes_an_invoke_only_key(config_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from koboi_cli.app import app

    runner = CliRunner()
    create = ["keys", "create", "--config", str(config_path), "--peer", "desk"]
    made = runner.invoke(app, [*create, "--rate-limit", "30", "--budget-usd", "2.5", "--json"])
    assert made.exit_code == 0, made.output
    key = json.loads(made.stdout)
    assert (key["principal"], key["name"], key["scopes"]) == ("desk", "peer desk", ["invoke"])
    assert (key["rate_per_minute"], key["budget_usd"]) == (30, 2.5)
    listed = runner.invoke(app, ["keys", "list", "--config", str(config_path)])
    assert "scopes invoke  30/min  budget 2.5 USD" in listed.stdout
    both = runner.invoke(
        app, ["keys", "create", "--config", str(config_path), "--peer", "a", "--principal", "b"]
    )
    assert both.exit_code != 0 and "do not give --principal too" in both.stderr
