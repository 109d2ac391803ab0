"""The ``memory`` section: where long-term memory is kept, its limits, proactive mode.

Only pydantic here. koboi-agent's keys are accepted: ``backend``, ``db_path``,
``owner``, ``proactive`` (``enabled``, ``extract``, ``recall``, ``core_block``,
``top_k``, ``min_score``, ``max_facts``, ``repo_scoped``); its conversation keys
``session_id`` and ``retention`` are accepted and have no effect here (a koboi
session's conversation lives in its journal), which the agent logs once when it opens.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Retention(BaseModel):
    """koboi-agent's conversation retention (no effect: the journal keeps the session)."""

    model_config = ConfigDict(extra="forbid")

    max_messages: int | None = Field(
        default=None, ge=1, description="Accepted for koboi-agent configs; no effect."
    )


class ProactiveSettings(BaseModel):
    """Memory the agent keeps without being asked."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=False,
        description="Turn proactive memory on (and the three switches below that are on).",
    )
    extract: bool = Field(
        default=False,
        description="After each answer, the model is asked "
        "(a journaled side call) which lasting facts the turn taught; they are stored.",
    )
    recall: bool = Field(
        default=False,
        description="Before each model call, the facts that "
        "match the user's message (lexical, plus vectors with an embedder) are "
        "added to the request.",
    )
    core_block: bool = Field(
        default=False,
        description="A small block of core facts (those "
        "stored with core: true) is in every request.",
    )
    top_k: int = Field(default=4, ge=1, le=50, description="Facts recalled per message.")
    min_score: float = Field(
        default=0.0,
        ge=0.0,
        description="Recalled facts must score at least "
        "this (the cosine with an embedder, else the BM25 score).",
    )
    max_facts: int = Field(
        default=200,
        ge=1,
        description="Most facts extraction keeps per user "
        "and agent; the oldest extracted ones go first.",
    )
    repo_scoped: bool = Field(
        default=False,
        description="Keep the core block per project "
        "(the config's directory) as well as per user and agent.",
    )
    core_block_chars: int = Field(
        default=2000, ge=100, le=20_000, description="Longest core block, in characters."
    )

    def wants(self, switch: Literal["extract", "recall", "core_block"]) -> bool:
        return self.enabled and bool(getattr(self, switch))


class MemorySettings(BaseModel):
    """Long-term memory: facts kept per user (principal) and agent, in the agent's store."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["store", "sqlite", "postgresql", "memory"] = Field(
        default="store",
        description="Where facts are kept: 'store' (the agent's store; 'sqlite' and "
        "'postgresql' mean the same, for koboi-agent configs), or 'memory' (this process "
        "only). With db_path or url, that database instead.",
    )
    db_path: str | None = Field(
        default=None,
        description="A SQLite file of its own for memory (relative to the config), instead "
        "of the agent's store.",
    )
    url: str | None = Field(
        default=None,
        description="A store URL of its own for memory (sqlite:///..., "
        "postgresql+psycopg://...), instead of the agent's store.",
    )
    owner: str | None = Field(
        default=None,
        description="Whose memory a run without a principal (a local run) uses; a server "
        "principal always uses its own.",
    )
    session_id: str | None = Field(
        default=None,
        description="Accepted for koboi-agent configs; no effect (use koboi run --session).",
    )
    retention: Retention = Field(
        default_factory=Retention, description="Accepted for koboi-agent configs; no effect."
    )
    tools: bool = Field(
        default=True,
        description="Offer memory_store, memory_recall and "
        "memory_forget when tools.builtin names them.",
    )
    max_facts: int = Field(
        default=1000,
        ge=1,
        description="Most facts per user and agent; storing one more drops the oldest.",
    )
    max_fact_chars: int = Field(
        default=500,
        ge=10,
        le=10_000,
        description="Longest fact, in "
        "characters; a longer one is refused (a tool) or cut (extraction).",
    )
    embedder: str | None = Field(
        default=None,
        description="An embedder registered with koboi-rag (its koboi_rag_register_embedders "
        "hook) for vector recall; none: lexical recall only.",
    )
    embedder_options: dict[str, Any] = Field(
        default_factory=dict, description="Options passed to the embedder's factory."
    )
    proactive: ProactiveSettings = Field(
        default_factory=ProactiveSettings, description="Proactive memory."
    )
