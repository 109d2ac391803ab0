"""koboi-embed-minilm: the all-MiniLM-L6-v2 embedder for koboi-rag, offline, on CPU."""

from koboi_embed_minilm._version import __version__

__all__ = ["__version__"]
