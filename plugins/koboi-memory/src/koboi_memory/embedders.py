"""Vectors for memory, from the embedders koboi-rag publishes, when it is installed.

koboi-rag defines the hook ``koboi_rag_register_embedders(register)``; plugins call
``register(name, factory, *, description="")`` with ``factory(options) -> Embedder``.
Memory never imports koboi-rag: it asks the plugin host for that hook's
registrations, and without an owner of the hook it recalls by words only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from koboi.errors import KoboiError

if TYPE_CHECKING:
    from koboi.plugins import PluginHost

HOOK = "koboi_rag_register_embedders"


class Embedder(Protocol):
    """koboi-rag's embedder contract (the part memory uses)."""

    @property
    def dimensions(self) -> int: ...

    async def fit(self, corpus: Sequence[str]) -> None: ...

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def embed_query(self, text: str) -> list[float]: ...


def embedder_named(host: PluginHost, name: str, options: Mapping[str, Any]) -> Embedder:
    """The embedder ``name`` built with ``options``; a clear error when there is none."""
    if host.hook_owner(HOOK) is None:
        raise KoboiError(
            f"memory.embedder is '{name}', but no installed plugin provides embedders "
            "(install koboi-rag), or remove memory.embedder to recall by words only"
        )
    registry = host.collect(HOOK, kind="embedder")
    entry = registry.get(name)
    if entry is None:
        known = ", ".join(registry.names()) or "none"
        raise KoboiError(f"memory.embedder: unknown embedder '{name}' (installed: {known})")
    made = entry.target(dict(options))
    if not _is_embedder(made):
        raise KoboiError(
            f"embedder '{name}' of plugin '{entry.plugin}' returned {made!r}, not an embedder"
        )
    return cast("Embedder", made)


def _is_embedder(made: object) -> bool:
    """Whether ``made`` has the contract's members, judged on its class: reading
    ``dimensions`` on the instance (what ``isinstance`` with a runtime protocol does)
    raises for an embedder that learns its space (LSA) until it is fitted."""
    kind = type(made)
    methods = ("fit", "embed_documents", "embed_query")
    sized = hasattr(kind, "dimensions") or "dimensions" in getattr(made, "__dict__", {})
    return sized and all(callable(getattr(kind, m, None)) for m in methods)
