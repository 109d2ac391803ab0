"""koboi hooks of koboi-server: the ``server`` section and the ``serve`` / ``keys`` commands.

Imports nothing heavy: FastAPI and uvicorn load only when a command runs.
"""

from __future__ import annotations

from collections.abc import Callable

from koboi.hookspecs import hookimpl


@hookimpl
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    from koboi_server.settings import SECTION, ServerSettings

    register(
        SECTION,
        ServerSettings,
        description="koboi serve: address, limits, streaming, draining and dev mode.",
    )


@hookimpl
def koboi_register_commands(register: Callable[..., None]) -> None:
    register(
        "serve",
        "koboi_server.cli:serve",
        help="Serve an agent over HTTP/SSE: API keys, sessions, streaming, approvals.",
    )
    register("keys", "koboi_server.cli:keys_app", help="Create, list and revoke API keys.")
