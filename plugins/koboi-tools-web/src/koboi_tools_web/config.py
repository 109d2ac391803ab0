"""The ``tools_web:`` config section.

Only pydantic, the stdlib and koboi-http's guard here (no httpx): loading the
plugin stays cheap.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from koboi_http.guard import normalize_allowed_host, normalize_allowed_network

SearchBackendName = Literal["offline", "brave", "duckduckgo", "firecrawl"]

#: Where each backend sends its queries unless ``search.base_url`` says otherwise.
DEFAULT_BASE_URLS: dict[str, str] = {
    "brave": "https://api.search.brave.com",
    "duckduckgo": "https://html.duckduckgo.com",
    "firecrawl": "https://api.firecrawl.dev",
}

#: The environment variable holding each keyed backend's API key.
KEY_VARIABLES: dict[str, str] = {
    "brave": "BRAVE_API_KEY",
    "firecrawl": "FIRECRAWL_API_KEY",
}


class CorpusDocument(BaseModel):
    """One document of the offline search backend's corpus."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(description="Title shown in the results and weighted highest when matching.")
    url: str = Field(description="URL shown in the results (it is never fetched by web_search).")
    text: str = Field(
        default="", description="Body text matched against the query; the snippet comes from it."
    )


class SearchSettings(BaseModel):
    """Settings of ``web_search``: which backend answers, and how to reach it."""

    model_config = ConfigDict(extra="forbid")

    backend: SearchBackendName = Field(
        default="offline",
        description=(
            "Who answers web_search: 'offline' (deterministic, nothing leaves the machine: the "
            "corpus below, or results derived from the query), 'brave' (Brave Search API, key "
            "BRAVE_API_KEY), 'duckduckgo' (DuckDuckGo's HTML endpoint, no key) or 'firecrawl' "
            "(Firecrawl search API, key FIRECRAWL_API_KEY)."
        ),
    )
    base_url: str | None = Field(
        default=None,
        description=(
            "Root URL of the backend's API, replacing the public one (for a proxy, a mirror or "
            "tests), e.g. 'https://api.search.brave.com'. The backend's own path is appended."
        ),
    )
    api_key: SecretStr | None = Field(
        default=None,
        description=(
            "API key of the brave or firecrawl backend; write it as ${BRAVE_API_KEY} or "
            "${FIRECRAWL_API_KEY}. Without it the key is read from that environment variable."
        ),
    )
    timeout: float = Field(
        default=15.0, gt=0, le=120, description="Seconds one search request may take in total."
    )
    max_results: int = Field(
        default=10, ge=1, le=50, description="Most results one web_search call may ask for."
    )
    corpus: list[CorpusDocument] = Field(
        default_factory=list,
        description=(
            "Documents the offline backend searches (for evals and tests). Empty: the offline "
            "backend returns results derived deterministically from the query instead."
        ),
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return value.rstrip("/") if value is not None else None

    @model_validator(mode="after")
    def _key_only_where_used(self) -> SearchSettings:
        if self.api_key is not None and self.backend not in KEY_VARIABLES:
            raise ValueError(f"the {self.backend} backend takes no api_key")
        return self

    def endpoint_root(self) -> str:
        """The API root this backend talks to (``base_url`` or the public one)."""
        return self.base_url or DEFAULT_BASE_URLS[self.backend]


class WebSettings(BaseModel):
    """Settings of the web tools: the fetch limits, the intranet allow-list, the search backend."""

    model_config = ConfigDict(extra="forbid")

    allow_hosts: list[str] = Field(
        default_factory=list,
        description=(
            "Host names web_fetch may reach even when they resolve to private, loopback or other "
            "non-public addresses (intranet use). 'wiki.corp' matches that name only, "
            "'*.corp' any name under corp; an IP address here allows that one address. Cloud "
            "metadata addresses stay refused."
        ),
    )
    allow_networks: list[str] = Field(
        default_factory=list,
        description=(
            "CIDR networks (e.g. '10.20.0.0/16', 'fd12:3456::/48') whose addresses web_fetch may "
            "reach although they are not public. Cloud metadata addresses stay refused."
        ),
    )
    max_bytes: int = Field(
        default=2_000_000,
        ge=1024,
        le=100_000_000,
        description="web_fetch stops reading a response body after this many (decoded) bytes.",
    )
    max_chars: int = Field(
        default=100_000,
        ge=100,
        le=1_000_000,
        description="Upper bound of web_fetch's max_chars argument (characters of text returned).",
    )
    default_max_chars: int = Field(
        default=20_000,
        ge=100,
        le=1_000_000,
        description="max_chars of a web_fetch call that does not give one.",
    )
    timeout: float = Field(
        default=20.0,
        gt=0,
        le=300,
        description="Seconds one web_fetch call may take in total, redirects included.",
    )
    connect_timeout: float = Field(
        default=5.0, gt=0, le=60, description="Seconds to establish one connection."
    )
    max_redirects: int = Field(
        default=5, ge=0, le=20, description="Redirects web_fetch follows (each one re-checked)."
    )
    user_agent: str = Field(
        default="koboi-tools-web/0.1 (+web_fetch)",
        description="User-Agent header of web_fetch and duckduckgo requests.",
    )
    search: SearchSettings = Field(
        default_factory=SearchSettings, description="The web_search backend and its settings."
    )

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, values: list[str]) -> list[str]:
        for value in values:
            normalize_allowed_network(value)  # entries are kept as written
        return values

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, values: list[str]) -> list[str]:
        return [normalize_allowed_host(value) for value in values]

    @model_validator(mode="after")
    def _default_within_bound(self) -> WebSettings:
        if self.default_max_chars > self.max_chars:
            raise ValueError(
                f"default_max_chars ({self.default_max_chars}) exceeds max_chars ({self.max_chars})"
            )
        return self
