"""koboi hooks of koboi-server: the ``server`` section, the ``serve`` / ``keys`` commands, and
the hook other plugins extend the server with (``koboi_server_register_extensions``).

Imports nothing heavy: FastAPI and uvicorn load only when a command runs.
"""

from __future__ import annotations

from collections.abc import Callable

from koboi.hookspecs import hookimpl


@hookimpl
def koboi_register_hookspecs(register: Callable[..., None]) -> None:
    from koboi_server import hookspecs

    register(hookspecs)


@hookimpl
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    from koboi_server import aliases
    from koboi_server.settings import SECTION, ServerSettings

    register(
        SECTION,
        ServerSettings,
        description="koboi serve: address, limits, streaming, draining and dev mode.",
        # koboi-agent's spelling: accepted, and `koboi validate --suggest` shows koboi's.
        aliases={"jobs": aliases.jobs},
    )


@hookimpl
def koboi_register_commands(register: Callable[..., None]) -> None:
    register(
        "serve",
        "koboi_server.cli:serve",
        help="Serve an agent over HTTP/SSE: API keys, sessions, streaming, approvals.",
    )
    register("keys", "koboi_server.cli:keys_app", help="Create, list and revoke API keys.")
