"""``koboi serve`` and ``koboi keys``.

``koboi keys`` uses the store every other command uses: ``--config``'s
``store.url``, else ``KOBOI_STORE``, else the default store (docs/config.md,
"Finding the store") — the store the server of that config uses.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import typer

from koboi.errors import KoboiError

T = TypeVar("T")


class LogLevel(StrEnum):
    critical = "critical"
    error = "error"
    warning = "warning"
    info = "info"
    debug = "debug"


def serve(
    config: Annotated[
        Path,
        typer.Argument(metavar="CONFIG", help="The agent's YAML config file.", show_default=False),
    ],
    host: Annotated[
        str | None,
        typer.Option("--host", help="Address to listen on [default: server.host, 127.0.0.1]."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port", min=1, max=65535, help="Port to listen on [default: server.port, 8080]."
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            max=64,
            help="Worker processes sharing the store [default: server.workers, 1].",
        ),
    ] = None,
    dev_no_auth: Annotated[
        bool,
        typer.Option(
            "--dev-no-auth",
            help="Development only: requests without a key act as principal 'dev' "
            "(refused unless the host is a loopback address).",
        ),
    ] = False,
    log_level: Annotated[
        LogLevel, typer.Option("--log-level", help="Server log level.")
    ] = LogLevel.info,
) -> None:
    """Serve an agent over HTTP/SSE until SIGTERM or Ctrl-C.

    Every /v1 route needs an API key (koboi keys create --config CONFIG). On
    SIGTERM the server stops accepting connections, lets running steps reach a
    journal boundary within server.drain_seconds, leaves what is left
    resumable, and exits.
    """
    from koboi_server.serve import serve as run_server

    overrides: dict[str, Any] = {}
    for name, value in (("host", host), ("port", port), ("workers", workers)):
        if value is not None:
            overrides[name] = value
    if dev_no_auth:
        overrides["dev_no_auth"] = True
    raise typer.Exit(run_server(config, overrides, log_level=log_level.value))


keys_app = typer.Typer(
    help="API keys of koboi serve, kept hashed in the store (shown once, at creation).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="Agent config whose store to use (default: KOBOI_STORE, else .koboi/koboi.db).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _with_keys(config: Path | None, work: Callable[[Any], Awaitable[T]]) -> T:
    from koboi_cli.api import open_store, store_target
    from koboi_server.keys import KeyRing

    target = store_target(config)
    if target.is_memory:
        raise KoboiError(
            "API keys must be kept in a durable store, and this one is memory:// (gone when the "
            "command ends): set store.url in the config (sqlite:///... or postgresql+psycopg://...)"
        )

    async def main() -> T:
        async with open_store(target) as store:
            return await work(KeyRing(store))

    return anyio.run(main)


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@keys_app.command("create")
def keys_create(
    config: ConfigOpt = None,
    principal: Annotated[
        str,
        typer.Option(
            "--principal",
            help="Who the key acts as: owner of what it creates; sees only that.",
        ),
    ] = "default",
    name: Annotated[str, typer.Option("--name", help="A label to recognise the key by.")] = "",
    peer: Annotated[
        str | None,
        typer.Option(
            "--peer",
            help="A peer's key: acts as principal NAME and may only invoke the agent "
            "(scope 'invoke'): no sessions, no jobs, no approvals.",
            show_default=False,
        ),
    ] = None,
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            help="What the key may call (repeatable): 'api' (the whole API, the default), "
            "'invoke' (only the routes that run the agent), or an extension's scope.",
            show_default=False,
        ),
    ] = None,
    rate_limit: Annotated[
        int | None,
        typer.Option(
            "--rate-limit",
            min=1,
            help="Requests per minute this key may make (429 beyond).",
            show_default=False,
        ),
    ] = None,
    budget_usd: Annotated[
        float | None,
        typer.Option(
            "--budget-usd",
            min=0,
            help="What this key's principal may spend on runs, in USD (routes that honour it "
            "refuse new runs beyond).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a key and print it. It is shown only now: the store keeps only its hash."""
    from koboi_server.keys import FULL_SCOPE, INVOKE_SCOPE

    if peer is not None:
        if principal != "default":
            raise KoboiError("--peer NAME is the key's principal: do not give --principal too")
        principal = peer
        name = name or f"peer {peer}"
    scopes = list(scope or ([INVOKE_SCOPE] if peer is not None else [FULL_SCOPE]))
    key, token = _with_keys(
        config,
        lambda ring: ring.create(
            principal, name=name, scopes=scopes, rate_per_minute=rate_limit, budget_usd=budget_usd
        ),
    )
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "key": token,
                    "key_id": key.key_id,
                    "principal": key.principal,
                    "name": key.name,
                    "created_at": key.created_at,
                    "scopes": list(key.scopes),
                    "rate_per_minute": key.rate_per_minute,
                    "budget_usd": key.budget_usd,
                }
            )
        )
        return
    typer.echo(token)
    typer.echo(
        f"key {key.key_id} for principal {key.principal!r} (scopes: {', '.join(key.scopes)}): copy it now, it is not shown again. "
        "Send it as 'Authorization: Bearer <key>'.",
        err=True,
    )


@keys_app.command("list")
def keys_list(config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """List the keys (never the keys themselves): id, principal, name, created, revoked."""
    keys = _with_keys(config, lambda ring: ring.list())
    if as_json:
        rows = [
            {
                "key_id": k.key_id,
                "principal": k.principal,
                "name": k.name,
                "created_at": k.created_at,
                "revoked_at": k.revoked_at,
                "scopes": list(k.scopes),
                "rate_per_minute": k.rate_per_minute,
                "budget_usd": k.budget_usd,
            }
            for k in keys
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    if not keys:
        typer.echo("no API keys (create one with: koboi keys create --config CONFIG)")
        return
    for key in keys:
        state = f"revoked {_when(key.revoked_at)}" if key.revoked else "active"
        label = f"  {key.name!r}" if key.name else ""
        limits = "".join(
            (
                f"  {key.rate_per_minute}/min" if key.rate_per_minute is not None else "",
                f"  budget {key.budget_usd} USD" if key.budget_usd is not None else "",
            )
        )
        typer.echo(
            f"{key.key_id}  {key.principal}  {state}  created {_when(key.created_at)}  "
            f"scopes {','.join(key.scopes)}{limits}{label}"
        )


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[
        str, typer.Argument(metavar="KEY_ID", help="The key's id, from 'koboi keys list'.")
    ],
    config: ConfigOpt = None,
) -> None:
    """Revoke a key: every replica refuses it from its next request, open streams included."""
    key = _with_keys(config, lambda ring: ring.revoke(key_id))
    typer.echo(f"revoked {key.key_id} (principal {key.principal!r})")
