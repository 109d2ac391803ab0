"""``koboi mcp``: the MCP servers of a config — list them, show a server's tools, log in
and out.

Each command takes the agent's config (``--config``): the servers are its ``mcp``
section, the sandbox a stdio server starts in is its sandbox, and OAuth tokens
live in its store (found as every command finds it).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from koboi_cli.api import (
    CliError,
    JsonOption,
    Style,
    get_host,
    mask_strings,
    open_store,
    print_json,
    store_target,
    table,
    write,
)

app = typer.Typer(
    help="The MCP servers of a config: list, tools, login, logout.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

ConfigRequired = Annotated[
    Path,
    typer.Option(
        "--config", "-c", help="The agent's YAML config file (its mcp section).", show_default=False
    ),
]
ServerName = Annotated[str, typer.Argument(help="The server's name in the mcp section.")]


def _settings(config: Path) -> Any:
    from koboi.config import load_config
    from koboi_mcp.config import McpSettings

    loaded = load_config(config, get_host().catalog())
    section = loaded.section("mcp")
    if not isinstance(section, McpSettings) or not section.servers:
        raise CliError(f"{config} has no MCP servers (its mcp.servers section is empty)")
    return loaded, section


def _server(section: Any, name: str) -> Any:
    server = section.servers.get(name)
    if server is None:
        known = ", ".join(sorted(section.servers)) or "none"
        raise CliError(f"no MCP server named {name!r} in the config (servers: {known})")
    return server


@contextlib.asynccontextmanager
async def _toolset(config: Path, only: str | None = None) -> AsyncIterator[Any]:
    """The config's MCP toolset, opened with its sandbox and store (servers started)."""
    from koboi.errors import KoboiError
    from koboi.sandbox import Sandbox
    from koboi.toolsets import ToolsetContext
    from koboi_mcp.config import McpSettings
    from koboi_mcp.toolset import McpToolset

    loaded, section = _settings(config)
    if only is not None:
        _server(section, only)
        section = McpSettings.model_validate(
            {**section.model_dump(), "servers": {only: section.servers[only].model_dump()}}
        )
    catalog = get_host().catalog()
    entry = catalog.sandboxes.get(loaded.sandbox.backend)
    if entry is None:
        raise CliError(f"sandbox backend {loaded.sandbox.backend!r} is not installed")
    sandbox = entry.target(loaded.sandbox_options, loaded)
    if not isinstance(sandbox, Sandbox):
        raise KoboiError(f"sandbox plugin {entry.plugin!r} did not return a sandbox")
    toolset = McpToolset(section, base_dir=loaded.base_dir)
    try:
        async with open_store(store_target(config)) as store:
            await toolset.open(ToolsetContext(loaded, sandbox, store, get_host()))
            try:
                yield toolset
            finally:
                await toolset.aclose()
    finally:
        await sandbox.aclose()


def _where(server: Any) -> str:
    if server.transport == "stdio":
        return " ".join([server.command, *server.args])
    return str(server.url)


@app.command("list")
def list_servers(config: ConfigRequired, as_json: JsonOption = False) -> None:
    """Each server of the config: where it is, whether it starts, its tools."""

    async def run() -> list[dict[str, Any]]:
        async with _toolset(config) as toolset:
            _, section = _settings(config)
            rows = []
            for name, server in section.servers.items():
                connection = toolset.connections.get(name)
                state = connection.state if connection is not None else None
                rows.append(
                    {
                        "name": name,
                        "transport": server.transport,
                        "where": _where(server),
                        "enabled": server.enabled,
                        "auth": server.auth.type,
                        "up": bool(state and state.up),
                        "error": state.error if state else None,
                        "protocol_version": state.protocol_version if state else None,
                        "server": state.server_info.name if state and state.server_info else None,
                        "tools": len(state.tools) if state else 0,
                    }
                )
            return rows

    rows = mask_strings(anyio.run(run))
    if as_json:
        print_json(rows)
        return
    style = Style(sys.stdout)
    shown = [
        [
            r["name"],
            r["transport"],
            ("up" if r["up"] else "disabled" if not r["enabled"] else "down"),
            str(r["tools"]),
            r["where"],
        ]
        for r in rows
    ]
    write(sys.stdout, table(["NAME", "TRANSPORT", "STATUS", "TOOLS", "WHERE"], shown, style))
    for r in rows:
        if r["error"]:
            write(sys.stderr, f"{r['name']}: {r['error']}\n")


@app.command("tools")
def tools(name: ServerName, config: ConfigRequired, as_json: JsonOption = False) -> None:
    """The tools a server offers the agent: their names, risk and idempotency."""

    from koboi.toolsets import offered_name

    async def run() -> list[dict[str, Any]]:
        async with _toolset(config, only=name) as toolset:
            connection = toolset.connections[name]
            if not connection.state.up:
                raise CliError(connection.state.error or f"MCP server {name!r} is down")
            return [
                {
                    # As the agent offers it (<namespace>__<tool>, made safe for model APIs).
                    "name": offered_name(tool.namespace, tool.name)
                    if tool.namespace
                    else tool.name,
                    "remote_name": getattr(tool, "remote_name", None),
                    "risk": tool.risk.value,
                    "idempotent": tool.idempotent,
                    "description": tool.description,
                }
                for tool in toolset.tools()
            ]

    rows = mask_strings(anyio.run(run))
    if as_json:
        print_json(rows)
        return
    shown = [
        [
            r["name"],
            r["risk"],
            "yes" if r["idempotent"] else "no",
            r["description"].split("\n")[0][:60],
        ]
        for r in rows
    ]
    write(
        sys.stdout, table(["TOOL", "RISK", "IDEMPOTENT", "DESCRIPTION"], shown, Style(sys.stdout))
    )


@app.command("login")
def login(name: ServerName, config: ConfigRequired, as_json: JsonOption = False) -> None:
    """Log in to an OAuth server once; the tokens are kept in the config's store."""
    from koboi_mcp.auth import login as do_login

    _, section = _settings(config)
    server = _server(section, name)

    async def run() -> int:
        async with open_store(store_target(config)) as store:
            return await do_login(name, server, store)

    count = anyio.run(run)
    if as_json:
        print_json({"server": name, "logged_in": True, "tools": count})
        return
    write(sys.stdout, f"logged in to {name} ({count} tools); the tokens are in the store\n")


@app.command("logout")
def logout(name: ServerName, config: ConfigRequired, as_json: JsonOption = False) -> None:
    """Forget a server's tokens (and the client koboi registered with it)."""
    from koboi_mcp.auth import logout as do_logout

    _, section = _settings(config)
    server = _server(section, name)

    async def run() -> bool:
        async with open_store(store_target(config)) as store:
            return await do_logout(name, server, store)

    forgot = anyio.run(run)
    if as_json:
        print_json({"server": name, "forgot": forgot})
        return
    write(sys.stdout, f"{name}: tokens forgotten\n" if forgot else f"{name}: no tokens kept\n")
