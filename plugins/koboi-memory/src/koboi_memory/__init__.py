"""koboi-memory: long-term memory per user (principal) and agent, in the agent's store.

Tools (memory_store, memory_recall, memory_forget), proactive memory (recall before
each model call, a core block, extraction after each answer) and ``koboi memory``.
Importing this package imports nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_memory._version import __version__
    from koboi_memory.config import MemorySettings
    from koboi_memory.store import Fact, MemoryStore, Scope

__all__ = ["Fact", "MemorySettings", "MemoryStore", "Scope", "__version__"]

_WHERE = {
    "__version__": "koboi_memory._version",
    "MemorySettings": "koboi_memory.config",
    "Fact": "koboi_memory.store",
    "MemoryStore": "koboi_memory.store",
    "Scope": "koboi_memory.store",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
