"""koboi hooks of koboi-rag (plugin id ``rag``).

Only ``@hookimpl`` functions: numpy, bm25s, httpx and the config model are imported
when a hook or factory runs, so `koboi --help` loads none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koboi.hookspecs import hookimpl

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.hookspecs import (
        RegisterCommand,
        RegisterConfigSection,
        RegisterHookspecs,
        RegisterInterceptor,
        RegisterToolset,
    )
    from koboi.toolsets import Toolset
    from koboi_rag.hookspecs import RegisterEmbedder, RegisterParser, RegisterSource


@hookimpl
def koboi_register_hookspecs(register: RegisterHookspecs) -> None:
    from koboi_rag import hookspecs

    register(hookspecs)


@hookimpl
def koboi_register_config_sections(register: RegisterConfigSection) -> None:
    from koboi_rag.config import RagSettings

    register(
        "rag",
        RagSettings,
        description="Retrieval over the config's documents: index, retrievers, rerankers, context.",
    )


def create_toolset(config: AgentConfig) -> Toolset | None:
    from koboi_rag.agent import create_toolset as make

    return make(config)


@hookimpl
def koboi_register_toolsets(register: RegisterToolset) -> None:
    register("rag", create_toolset, description="rag__search over the config's document index.")


@hookimpl
def koboi_register_interceptors(register: RegisterInterceptor, config: AgentConfig) -> None:
    settings = config.section("rag")
    if settings is None or not getattr(settings, "enabled", False):
        return
    from koboi_rag.agent import RagInterceptor

    register(RagInterceptor(settings, config))  # type: ignore[arg-type]


@hookimpl
def koboi_register_commands(register: RegisterCommand) -> None:
    register("rag", "koboi_rag.cli:app", help="Ingest, search, inspect and forget RAG indexes.")


def _lsa(options: Any) -> Any:
    from koboi_rag.embedders.lsa import create_lsa

    return create_lsa(options)


def _hashing(options: Any) -> Any:
    from koboi_rag.embedders.hashing import create_hashing

    return create_hashing(options)


def _openai(options: Any) -> Any:
    from koboi_rag.embedders.openai import create_openai

    return create_openai(options)


@hookimpl
def koboi_rag_register_embedders(register: RegisterEmbedder) -> None:
    register(
        "lsa",
        _lsa,
        description="Offline default: TF-IDF + truncated SVD learned from the collection.",
    )
    register("hashing", _hashing, description="Deterministic feature hashing (tests only).")
    register("openai", _openai, description="Any OpenAI-compatible /v1/embeddings endpoint.")


@hookimpl
def koboi_rag_register_parsers(register: RegisterParser) -> None:
    from koboi_rag.parsing import PLAIN_SUFFIXES, PLAIN_TYPES, PlainTextParser

    register(
        "plain",
        PlainTextParser(),
        suffixes=PLAIN_SUFFIXES,
        media_types=PLAIN_TYPES,
        priority=0,
        description="UTF-8 text, as is.",
    )


def _files(entry: Any, context: Any) -> Any:
    from koboi_rag.sources import create_files

    return create_files(entry, context)


def _http(entry: Any, context: Any) -> Any:
    from koboi_rag.sources import create_http

    return create_http(entry, context)


@hookimpl
def koboi_rag_register_sources(register: RegisterSource) -> None:
    register("files", _files, description="Files, directories and globs (relative to the config).")
    register(
        "http",
        _http,
        schemes=("http", "https"),
        description="http(s) URLs, through the SSRF guard of koboi-http.",
    )


@hookimpl
def koboi_eval_register_checks(register: Any) -> None:
    from koboi_rag.checks import retrieved_chunk

    register(
        "retrieved_chunk",
        retrieved_chunk,
        description="a retrieval (rag__search or added context) returned a chunk matching the "
        "given text, source or both",
    )
