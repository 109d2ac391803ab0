"""``koboi mcp-serve CONFIG``: serve an agent's tools over MCP.

stdio by default (what a desktop MCP client starts); ``--http`` serves
streamable HTTP on ``--host``/``--port``, where every request needs one of the
store's API keys (``koboi keys create``), as ``koboi serve`` does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import anyio
import typer

from koboi_cli.api import CliError, ConfigArgument


def serve(
    config: ConfigArgument,
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP instead of stdio.")
    ] = False,
    host: Annotated[
        str | None,
        typer.Option(
            "--host", help="HTTP: address to listen on [default: mcp-serve.host, 127.0.0.1]."
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            min=1,
            max=65535,
            help="HTTP: port to listen on [default: mcp-serve.port, 8765].",
        ),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            help="Expose this (moderate or destructive) tool too, besides mcp-serve.allow; "
            "repeatable. Its calls are still governed: approval, policy and rate limits apply.",
        ),
    ] = None,
    allow_all: Annotated[
        bool, typer.Option("--allow-all", help="Expose every tool (still governed).")
    ] = False,
    ask_agent: Annotated[
        bool,
        typer.Option(
            "--ask-agent", help="Also expose the agent itself as one tool, ask_<agent name>."
        ),
    ] = False,
    dev_no_auth: Annotated[
        bool,
        typer.Option(
            "--dev-no-auth",
            help="HTTP, development only: no API key needed (refused unless the host is a "
            "loopback address).",
        ),
    ] = False,
) -> None:
    """Serve CONFIG's agent's tools over MCP: safe tools only unless --allow / --allow-all.

    Every call goes through the agent's governance (mode, policy, approvals asked of the
    MCP client, rate limits, sandbox, journal, audit); a client that cannot approve gets
    deny-by-default.
    """
    from koboi_mcp_serve.run import Exposed, run_http, run_stdio

    if dev_no_auth and not http:
        raise CliError("--dev-no-auth is for --http (stdio has no keys)")
    if not Path(config).is_file():
        raise CliError(f"{config}: no such config file")
    flags = Exposed(allow=list(allow or []), allow_all=allow_all, ask_agent=ask_agent)
    if http:
        anyio.run(lambda: run_http(config, flags, host=host, port=port, dev_no_auth=dev_no_auth))
    else:
        anyio.run(lambda: run_stdio(config, flags))
    sys.exit(0)
