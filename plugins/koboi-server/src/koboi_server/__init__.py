"""koboi-server: ``koboi serve``, the HTTP/SSE service of a koboi agent.

``from koboi_server import create_app`` builds the FastAPI app in code. Names
are imported on first use: the plugin's hooks (``koboi_server.plugin``) import
this package, and ``koboi --help`` must not import FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_server._version import __version__
    from koboi_server.api import current_principal
    from koboi_server.app import create_app
    from koboi_server.keys import KeyRing, Principal
    from koboi_server.settings import ServerSettings

__all__ = [
    "KeyRing",
    "Principal",
    "ServerSettings",
    "__version__",
    "create_app",
    "current_principal",
]

_LAZY = {
    "__version__": "koboi_server._version",
    "create_app": "koboi_server.app",
    "current_principal": "koboi_server.api",
    "KeyRing": "koboi_server.keys",
    "Principal": "koboi_server.keys",
    "ServerSettings": "koboi_server.settings",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'koboi_server' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
