"""The ``rag`` config section.

It accepts the keys koboi-agent's ``rag`` section had (``enabled``, ``chunker``,
``chunk_size``, ``retriever``, ``top_k``, ``augmentation``, ``documents``,
``rerank``, ``max_document_size_mb``, ``query_rewrite``, ``hyde``, ``filter``,
``stopwords``, ``stemmer``, ``synonyms``, and the cache keys it no longer needs),
so such a config loads as it is.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

Retriever = Literal["keyword", "bm25", "semantic", "hybrid"]
Chunker = Literal["fixed", "sentence", "paragraph", "semantic"]


class EmbedderSettings(BaseModel):
    """``rag.embedder``: which embedder, and its options (every other key)."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(default="lsa", description="A registered embedder: lsa, hashing, openai…")


class RerankSettings(BaseModel):
    """``rag.rerank`` as a mapping: a hosted cross-encoder or the agent's own model."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    provider: Literal["jina", "cohere", "llm", "local"] = Field(
        description="jina or cohere (hosted cross-encoders), llm (the agent's model, through a "
        "journaled side call); local is koboi-agent's name for a local cross-encoder, which no "
        "installable package ships"
    )
    model: str = Field(default="", description="Reranking model; default: the provider's own.")
    base_url: str = Field(default="", description="API root; default: the provider's public API.")
    api_key: SecretStr | None = Field(
        default=None,
        description="API key; default: JINA_API_KEY or COHERE_API_KEY. Write it as ${VAR}.",
    )
    top_n: int | None = Field(default=None, ge=1, description="Results kept (default: top_k).")
    fetch_multiplier: int = Field(
        default=3, ge=1, le=50, description="Candidates reranked: top_k times this."
    )
    timeout_seconds: float = Field(default=30.0, gt=0, description="Per request.")
    max_retries: int = Field(default=2, ge=0, le=10, description="Retries of a failed request.")
    fail_open: bool = Field(
        default=True,
        description="When the reranker fails, keep the retriever's order (and say so in the "
        "results) instead of failing the search.",
    )

    @model_validator(mode="after")
    def _local(self) -> RerankSettings:
        if self.provider == "local":
            raise ValueError(
                "rerank provider 'local' needs a cross-encoder model that no package ships "
                "offline; use 'jina', 'cohere' or 'llm'"
            )
        return self


class HttpSourceSettings(BaseModel):
    """``rag.http``: fetching documents from http(s) URLs."""

    model_config = ConfigDict(extra="forbid")

    allow_hosts: list[str] = Field(
        default_factory=list,
        description="Intranet hosts documents may come from (names, *.suffix, addresses); "
        "everything else must be a public address.",
    )
    allow_networks: list[str] = Field(
        default_factory=list, description="Intranet networks (CIDR) documents may come from."
    )
    timeout_seconds: float = Field(default=30.0, gt=0, description="Per document.")
    max_redirects: int = Field(default=5, ge=0, le=20, description="Redirects followed.")

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        from koboi_http.guard import normalize_allowed_host

        return [normalize_allowed_host(v) for v in value]

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        from koboi_http.guard import normalize_allowed_network

        return [normalize_allowed_network(v) for v in value]


class HybridSettings(BaseModel):
    """``rag.hybrid``: reciprocal rank fusion of the lexical and the semantic ranking."""

    model_config = ConfigDict(extra="forbid")

    lexical: Literal["bm25", "keyword"] = Field(
        default="bm25", description="The lexical side of the fusion."
    )
    lexical_weight: float = Field(default=1.0, ge=0, description="Weight of the lexical rank.")
    semantic_weight: float = Field(default=1.0, ge=0, description="Weight of the semantic rank.")
    rrf_k: int = Field(default=60, ge=1, description="RRF constant: 1 / (k + rank).")
    candidates: int = Field(
        default=100, ge=1, description="How deep each ranking is read before fusing."
    )


class RagSettings(BaseModel):
    """Retrieval-augmented generation over the config's documents."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    enabled: bool = Field(default=True, description="False: the section is kept but unused.")
    documents: list[str | dict[str, Any]] = Field(
        default_factory=list,
        description="Files, directories, globs (relative to the config), http(s) URLs, "
        "s3:// URLs (koboi-rag-s3), or mappings {source: NAME, ...}.",
    )
    collection: str = Field(
        default="default",
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="Name of this index inside the database (several configs may share one).",
    )
    index: str = Field(
        default="store",
        description="Where the index lives: 'store' (the agent's store database: SQLite or "
        "PostgreSQL), or a sqlite:///path or postgresql:// URL.",
    )
    chunker: Chunker = Field(default="sentence", description="How documents are cut.")
    chunk_size: int = Field(default=500, ge=16, le=100_000, description="Target chunk size.")
    chunk_overlap: int = Field(default=50, ge=0, description="Overlap between fixed chunks.")
    chunk_unit: Literal["chars", "tokens"] = Field(
        default="chars", description="What chunk_size and chunk_overlap count."
    )
    retriever: Retriever = Field(default="hybrid", description="How chunks are found.")
    top_k: int = Field(default=3, ge=1, le=1000, description="Results returned.")
    hybrid: HybridSettings = Field(default_factory=HybridSettings, description="Fusion.")
    embedder: EmbedderSettings = Field(
        default_factory=EmbedderSettings, description="Embedder name and options (or a name)."
    )
    language: Literal["en", "id", "none"] = Field(
        default="en", description="Analyser: English (Snowball), Indonesian (Sastrawi), none."
    )
    stopwords: bool | Literal["en", "id"] | list[str] | None = Field(
        default=None,
        description="Override the analyser's stop words: false (none), en, id, or a list.",
    )
    stemmer: bool | Literal["en", "id"] | None = Field(
        default=None, description="Override the analyser's stemmer: false, en or id."
    )
    synonyms: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Query expansion for lexical retrieval: term -> extra terms.",
    )
    filter: dict[str, Any] | None = Field(
        default=None,
        description="Metadata filter applied to every search ($eq $ne $gt $gte $lt $lte $in "
        "$nin $exists, $and, $or); a filtering aid, not access control.",
    )
    augmentation: Literal["on_the_fly", "in_memory", "none"] = Field(
        default="on_the_fly",
        description="on_the_fly: retrieved chunks are added to each run's first model call; "
        "in_memory: kept in the conversation; none: only the rag__search tool.",
    )
    tool: bool = Field(default=True, description="Offer the rag__search tool to the model.")
    auto_ingest: bool = Field(
        default=True,
        description="Ingest rag.documents when an agent opens (incremental: an unchanged file "
        "costs a stat); false: only 'koboi rag ingest' does.",
    )
    min_score: float | None = Field(
        default=None, description="Drop results scoring below this (retriever's own scale)."
    )
    rerank: RerankSettings | None = Field(
        default=None,
        description="false, or a reranker ({provider: jina|cohere|llm}); true means the agent's "
        "model (llm).",
    )
    query_rewrite: bool = Field(
        default=False, description="Rewrite the query with the agent's model (journaled)."
    )
    hyde: bool = Field(
        default=False,
        description="Search with a hypothetical answer written by the agent's model (journaled).",
    )
    max_document_size_mb: float = Field(
        default=10, gt=0, description="Documents larger than this are skipped, with a message."
    )
    parsers: dict[str, str] = Field(
        default_factory=dict,
        description="Parser per suffix or media type, overriding the plugins' choice "
        "({'.txt': 'text'}).",
    )
    http: HttpSourceSettings = Field(default_factory=HttpSourceSettings, description="URLs.")
    context_template: str = Field(
        default="Retrieved context (cite sources as [n]):\n{results}",
        description="How retrieved chunks are shown to the model; {results} is the list.",
    )
    # koboi-agent keys this design does not need: accepted, and a note says so.
    live: bool = Field(default=False, description="koboi-agent's live corpus: not used here.")
    live_seed_file: str | None = Field(default=None, description="Not used (see live).")
    embedding_cache_path: str | None = Field(
        default=None, description="Not used: vectors are kept in the index."
    )
    document_cache_path: str | None = Field(
        default=None, description="Not used: documents are kept in the index."
    )
    custom_modules: list[str] = Field(
        default_factory=list, description="Not used: components come from plugins."
    )

    @field_validator("embedder", mode="before")
    @classmethod
    def _embedder_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("rerank", mode="before")
    @classmethod
    def _rerank_true(cls, value: Any) -> Any:
        # koboi-agent wrote true (rerank with a heuristic) and false.
        if value is True:
            return {"provider": "llm"}
        return None if value is False else value

    @field_validator("stopwords", mode="before")
    @classmethod
    def _stopwords_text(cls, value: Any) -> Any:
        # koboi-agent wrote "indonesian"/"english" too.
        aliases = {"indonesian": "id", "english": "en"}
        return aliases.get(value, value) if isinstance(value, str) else value

    @field_validator("stemmer", mode="before")
    @classmethod
    def _stemmer_text(cls, value: Any) -> Any:
        aliases = {"indonesian": "id", "english": "en", "sastrawi": "id", "snowball": "en"}
        return aliases.get(value, value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _overlap(self) -> RagSettings:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size "
                f"({self.chunk_size})"
            )
        return self

    @field_validator("filter")
    @classmethod
    def _filter(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            from koboi_rag.filters import compile_filter

            compile_filter(value)  # a bad filter fails here, with its key path
        return value

    @property
    def reranker(self) -> RerankSettings | None:
        return self.rerank

    def unused_keys(self) -> list[str]:
        """koboi-agent keys given that this design does not use (shown as a note)."""
        unused = []
        if self.live or self.live_seed_file:
            unused.append("live/live_seed_file (ingest with 'koboi rag ingest')")
        if self.embedding_cache_path or self.document_cache_path:
            unused.append("embedding_cache_path/document_cache_path (the index keeps both)")
        if self.custom_modules:
            unused.append("custom_modules (components come from plugins' hooks)")
        return unused
