"""koboi-context: long sessions whose model requests always fit the model's window.

The ``context`` section chooses a strategy (noop, truncation, smart_truncation,
sliding_window, key_facts, summarise); :class:`koboi_context.interceptor.ContextStrategy`
applies it to every request. Importing this package imports nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_context._version import __version__
    from koboi_context.config import ContextSettings
    from koboi_context.errors import ContextOverflow
    from koboi_context.hookspecs import CompactionHook, RegisterCompactionHook

__all__ = [
    "CompactionHook",
    "ContextOverflow",
    "ContextSettings",
    "RegisterCompactionHook",
    "__version__",
]

_WHERE = {
    "__version__": "koboi_context._version",
    "ContextSettings": "koboi_context.config",
    "ContextOverflow": "koboi_context.errors",
    "CompactionHook": "koboi_context.hookspecs",
    "RegisterCompactionHook": "koboi_context.hookspecs",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
