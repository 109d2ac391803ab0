"""These tests run in the venv `uv run nox -s minilm` makes with pip (torch's CPU
build, sentence-transformers, the model wheel). In the uv venv, where torch is never
installed, a bare `pytest` leaves them out instead of failing to import them; the
nox session itself fails if anything is missing."""

from __future__ import annotations

import importlib.util

collect_ignore_glob = (
    []
    if all(
        importlib.util.find_spec(m)
        for m in ("torch", "sentence_transformers", "koboi_embed_minilm")
    )
    else ["test_*.py"]
)
