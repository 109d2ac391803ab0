"""The plugin as the host sees it: cheap to import, its hooks defined and implemented,
its config section accepting koboi-agent's keys, an unknown embedder named clearly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from koboi import PluginHost, validate_config
from koboi.errors import ConfigError, KoboiError
from koboi_rag.embedders import embedder_from


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, koboi_rag.plugin\n"
        "heavy = [m for m in ('pydantic', 'numpy', 'scipy', 'bm25s', 'httpx', 'koboi_rag.engine') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == ""


def test_hooks_and_registrations(host: PluginHost) -> None:
    host.load()
    info = host.get("rag")
    assert info is not None and info.status == "loaded"
    assert set(info.defines) == {
        "koboi_rag_register_embedders",
        "koboi_rag_register_parsers",
        "koboi_rag_register_sources",
    }
    assert sorted(host.collect("koboi_rag_register_embedders").names()) == [
        "hashing",
        "lsa",
        "openai",
    ]
    with pytest.raises(KoboiError, match="koboi-embed-minilm provides 'minilm'"):
        embedder_from("minilm", host)
    with pytest.raises(KoboiError, match="did you mean 'lsa'"):
        embedder_from({"name": "lss"}, host)


def test_koboi_agent_rag_keys_are_accepted(host: PluginHost) -> None:
    raw = {
        "llm": {"provider": "scripted"},
        "rag": {
            "enabled": True,
            "chunker": "sentence",
            "chunk_size": 500,
            "retriever": "keyword",
            "top_k": 3,
            "augmentation": "on_the_fly",
            "documents": ["docs/"],
            "rerank": {"provider": "cohere", "model": "rerank-v3.5", "fetch_multiplier": 3},
            "live": False,
            "live_seed_file": None,
            "embedding_cache_path": ".cache/emb",
            "document_cache_path": None,
            "max_document_size_mb": 10,
            "query_rewrite": False,
            "hyde": False,
            "filter": {"year": {"$gte": 2020}},
            "stopwords": "indonesian",
            "stemmer": "id",
            "custom_modules": [],
            "synonyms": {"mobil": ["kendaraan"]},
        },
    }
    settings = validate_config(raw, host.catalog()).section("rag")
    assert settings is not None and settings.stopwords == "id"  # type: ignore[attr-defined]
    bad = {
        **raw,
        "rag": {**raw["rag"], "filter": {"year": {"$near": 1}}, "rerank": {"provider": "local"}},
    }
    with pytest.raises(ConfigError) as caught:
        validate_config(bad, host.catalog())
    text = str(caught.value)
    assert "rag.filter" in text and "$near: unknown operator" in text
    assert "no package ships offline" in text
