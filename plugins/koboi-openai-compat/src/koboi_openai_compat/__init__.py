"""koboi-openai-compat: an OpenAI-compatible endpoint on ``koboi serve``.

``GET /v1/models`` lists the agent as a model; ``POST /v1/chat/completions`` runs
it (JSON, or ``chat.completion.chunk`` server-sent events ending ``data: [DONE]``)
with koboi's API keys, sessions and governance. Nothing heavy is imported here:
the plugin host imports this package while plugins load, FastAPI only when
``koboi serve`` builds its app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_openai_compat._version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_openai_compat._version import __version__

        return __version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
