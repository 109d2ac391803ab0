"""Running ``koboi mcp-serve``: the agent opened once, its MCP server on stdio or HTTP."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from koboi.errors import KoboiError
from koboi.logs import get_logger
from koboi_mcp_serve.config import McpServeSettings
from koboi_mcp_serve.serve import PRINCIPAL_STATE, AgentMcpServer, ClientApprover, exposure

log = get_logger("koboi.mcp_serve")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Exposed:
    """What the command line adds to the config's ``mcp-serve`` section."""

    allow: list[str] = field(default_factory=list)
    allow_all: bool = False
    ask_agent: bool = False


@contextlib.asynccontextmanager
async def served_agent(config: Path, flags: Exposed) -> AsyncIterator[AgentMcpServer]:
    """The config's agent, opened, and its MCP server (the section, then the flags)."""
    from koboi.agent import KoboiAgent

    agent = KoboiAgent.from_config(config, approver=ClientApprover())
    settings = settings_of(agent)
    async with agent:
        yield AgentMcpServer(
            agent,
            exposure=exposure(
                [*settings.allow, *flags.allow], settings.allow_all or flags.allow_all
            ),
            ask_agent=settings.ask_agent or flags.ask_agent,
        )


def settings_of(agent: Any) -> McpServeSettings:
    section = agent.config.section("mcp-serve")
    return section if isinstance(section, McpServeSettings) else McpServeSettings()


async def run_stdio(config: Path, flags: Exposed) -> None:
    """Serve over this process's stdin/stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    async with served_agent(config, flags) as made:
        server = made.server
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiKeyGate:
    """ASGI middleware: every request needs one of the store's API keys (``koboi keys``);
    its principal owns the sessions the request's calls make."""

    def __init__(self, app: App, verify: Callable[[str], Awaitable[Any]] | None) -> None:
        self.app = app
        self.verify = verify  # None: development mode, no key needed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.verify is None:
            await self.app(scope, receive, send)
            return
        token = ""
        for name, value in scope.get("headers") or ():
            if name.lower() == b"authorization":
                text = value.decode("latin-1")
                if text[:7].lower() == "bearer ":
                    token = text[7:].strip()
        principal = await self.verify(token) if token else None
        if principal is None:
            body = json.dumps(
                {
                    "error": "unauthorized",
                    "message": "an API key is needed: 'Authorization: Bearer <key>' "
                    "(koboi keys create --config CONFIG)",
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="koboi"'),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        scope.setdefault("state", {})[PRINCIPAL_STATE] = principal.name
        await self.app(scope, receive, send)


async def run_http(
    config: Path,
    flags: Exposed,
    *,
    host: str | None = None,
    port: int | None = None,
    dev_no_auth: bool = False,
) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until interrupted."""
    import uvicorn

    from koboi_server.keys import KeyRing

    async with served_agent(config, flags) as made:
        settings = settings_of(made.agent)
        host = host or settings.host
        port = port or settings.port
        if dev_no_auth and not _loopback(host):
            raise KoboiError(f"--dev-no-auth is refused on {host}: only on a loopback address")
        verify = None
        if not dev_no_auth:
            keys = KeyRing(made.agent.store)
            if not [k for k in await keys.list() if not k.revoked]:
                raise KoboiError(
                    "the store has no API key: create one with 'koboi keys create --principal "
                    f"NAME --config {config}' (or, on a loopback address, --dev-no-auth)"
                )
            verify = keys.verify
        app = ApiKeyGate(made.server.streamable_http_app(host=host), verify)
        server = uvicorn.Server(
            uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        )
        print(
            f"koboi mcp-serve: {made.agent.config.agent.name} at http://{host}:{port}/mcp "
            f"({len(made.exposed())} tools exposed"
            + (", no API key needed: development only" if dev_no_auth else "")
            + ")",
            file=sys.stderr,
            flush=True,
        )
        await server.serve()
