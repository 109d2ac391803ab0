"""koboi-rag: retrieval over an agent's documents, with the index in the agent's store.

Importing this package costs nothing (the plugin host imports it at start-up);
the engine, the config model and the embedders are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_rag._version import __version__
    from koboi_rag.config import RagSettings
    from koboi_rag.embedders import embedder_from
    from koboi_rag.engine import IngestReport, RagEngine, SearchOutcome, SearchResult
    from koboi_rag.hookspecs import Embedder

_WHERE = {
    "__version__": "koboi_rag._version",
    "RagSettings": "koboi_rag.config",
    "RagEngine": "koboi_rag.engine",
    "IngestReport": "koboi_rag.engine",
    "SearchOutcome": "koboi_rag.engine",
    "SearchResult": "koboi_rag.engine",
    "Embedder": "koboi_rag.hookspecs",
    "embedder_from": "koboi_rag.embedders",
}

__all__ = [
    "Embedder",
    "IngestReport",
    "RagEngine",
    "RagSettings",
    "SearchOutcome",
    "SearchResult",
    "__version__",
    "embedder_from",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'koboi_rag' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
