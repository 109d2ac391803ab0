"""Embedders: koboi-rag's own (``lsa``, ``hashing``, ``openai``) and every plugin's,
through the hook ``koboi_rag_register_embedders``.

Another plugin that needs embeddings (long-term memory, say) uses the same
registry::

    from koboi_rag.embedders import embedder_from

    embedder = embedder_from({"name": "lsa", "dimensions": 128}, host)
    await embedder.fit(corpus)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from koboi.errors import KoboiError

if TYPE_CHECKING:
    from koboi.plugins import PluginHost
    from koboi.registry import Registry
    from koboi_rag.hookspecs import Embedder


class UnknownEmbedder(KoboiError):
    """A config names an embedder no installed plugin provides."""


def embedders(host: PluginHost | None = None) -> Registry[Any]:
    """Every installed embedder, by name."""
    from koboi.plugins import default_host
    from koboi_rag.hookspecs import REGISTER_EMBEDDERS

    return (host or default_host()).collect(REGISTER_EMBEDDERS, kind="embedder")


def embedder_from(spec: str | Mapping[str, Any], host: PluginHost | None = None) -> Embedder:
    """The embedder ``spec`` names: a name, or a mapping with ``name`` and its options."""
    if isinstance(spec, str):
        name, options = spec, {}
    else:
        options = {k: v for k, v in spec.items() if k != "name"}
        name = str(spec.get("name", "lsa"))
    registry = embedders(host)
    entry = registry.get(name)
    if entry is None:
        import difflib

        known = sorted(registry.names())
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        extra = " (koboi-embed-minilm provides 'minilm')" if name == "minilm" else ""
        raise UnknownEmbedder(
            f"rag.embedder: no installed plugin provides the embedder {name!r}{extra}; "
            f"{hint}installed: {', '.join(known) or 'none'}"
        )
    embedder = entry.target(options)
    for member in ("fit", "embed_documents", "embed_query"):
        if not callable(getattr(embedder, member, None)):
            raise KoboiError(
                f"embedder {name!r} of plugin {entry.plugin!r} returned {type(embedder).__name__}, "
                f"which has no {member}() (see koboi_rag.hookspecs.Embedder)"
            )
    return embedder  # type: ignore[no-any-return]
