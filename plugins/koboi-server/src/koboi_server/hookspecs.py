"""The hook koboi-server defines for other plugins: ``koboi_server_register_extensions``.

Imports nothing but the hook marker (koboi's hook loader reads this module while
plugins load, before anything else).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from koboi.hookspecs import hookspec

REGISTER_EXTENSIONS = "koboi_server_register_extensions"
EXTENSION_KIND = "server extension"


class RegisterServerExtension(Protocol):
    """``register(name, factory, *, description="")``.

    ``factory(context)`` is called once per app, when ``koboi serve`` (``create_app``)
    builds it, with a :class:`koboi_server.extensions.ServerContext`; it returns a
    :class:`koboi_server.extensions.ServerExtension` (routes, metrics) or None when
    that config does not use it.
    """

    def __call__(
        self, name: str, target: Callable[[Any], Any], *, description: str = "", **extra: Any
    ) -> None: ...


@hookspec
def koboi_server_register_extensions(register: RegisterServerExtension) -> None:
    """Add routes and metrics to ``koboi serve``: an A2A endpoint, a web console, an
    OpenAI-compatible API, telemetry. Collected once per plugin host, when the first app
    is built. Sync only; import FastAPI and the rest inside the factory.

    Routes go through the server's authentication: every route of an extension's router
    must be under ``/v1/`` (an API key; ``current_principal`` says whose), except the
    paths it lists in ``public_paths``. Use ``owned_session`` for a session of the caller's.
    """
