"""koboi hooks of koboi-embed-minilm (plugin id ``embed-minilm``): the ``minilm``
embedder of koboi-rag. torch and sentence-transformers are imported when an index
first needs the embedder, never while koboi starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koboi.hookspecs import hookimpl


def create_minilm(options: Mapping[str, Any]) -> Any:
    from koboi_embed_minilm.embedder import create

    return create(options)


@hookimpl
def koboi_rag_register_embedders(register: Any) -> None:
    register(
        "minilm",
        create_minilm,
        description="all-MiniLM-L6-v2 (384 dimensions), local, CPU, shipped in a wheel.",
    )
