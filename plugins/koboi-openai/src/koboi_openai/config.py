"""The options of the ``openai`` provider: the ``llm:`` section minus ``provider``.

Only pydantic and ``koboi_http.options`` here (no httpx), so the plugin module
can register the model without importing the HTTP stack.

Where the key comes from depends on where it goes. ``OPENAI_API_KEY`` is
OpenAI's credential: it is read from the environment only when ``base_url``
is OpenAI's own API. For any other server (vLLM, Ollama, OpenRouter...) the
key must be named explicitly (``api_key`` or ``api_key_env_var``), and none at
all is fine: a local server needs none, and then no ``Authorization`` header
is sent. Otherwise pointing an agent at a test server would silently hand it
the user's OpenAI key.
"""

from __future__ import annotations

import os
import re
from typing import ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from koboi_http.keys import looks_like_placeholder, resolve_api_key
from koboi_http.options import HTTPProviderOptions, replaying

DEFAULT_BASE_URL = "https://api.openai.com/v1"
OPENAI_HOST = "api.openai.com"

#: Body keys the provider sets itself; an option may not replace them.
RESERVED_BODY_KEYS = frozenset({"model", "messages", "stream", "stream_options", "tools"})

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Characters that URL parsers disagree about (a backslash is a path separator
# for httpx and WHATWG, part of the authority for urllib), or that have no
# business in a URL: refusing them means the host we check is the host httpx
# connects to.
_AMBIGUOUS_URL_CHARS = re.compile(r"[\\\s\x00-\x1f\x7f]")


def is_openai_url(url: str) -> bool:
    """True when ``url`` is OpenAI's own API (https, host api.openai.com, default port)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return False
    return (
        parts.scheme.lower() == "https"
        and parts.hostname == OPENAI_HOST
        and port in (None, 443)
        and "@" not in parts.netloc
    )


class OpenAIOptions(HTTPProviderOptions):
    """Options of the OpenAI Chat Completions provider (and OpenAI-compatible servers)."""

    api_key_env: ClassVar[tuple[str, ...]] = ("OPENAI_API_KEY",)
    reserved_options: ClassVar[frozenset[str]] = RESERVED_BODY_KEYS
    #: A key is required for OpenAI's API only; see :meth:`_key`.
    api_key_required: ClassVar[bool] = False

    model: str = Field(
        description="Model name, as the server spells it (gpt-4o-mini, llama3.1:8b...).",
        min_length=1,
    )
    base_url: str = Field(
        default=DEFAULT_BASE_URL,
        description=(
            "API root; POST {base_url}/chat/completions. Point it at any OpenAI-compatible "
            "server (http://localhost:11434/v1 for Ollama, http://localhost:8000/v1 for vLLM). "
            "OPENAI_API_KEY is only ever sent to https://api.openai.com."
        ),
    )
    api_key: SecretStr | None = Field(
        default=None,
        description=(
            "API key. For OpenAI's API, default: OPENAI_API_KEY. For any other base_url the key "
            "is never taken from OPENAI_API_KEY: set it here (as ${VAR}, never inline) or name "
            "a variable in api_key_env_var; leave both out for a server that needs no key."
        ),
    )
    api_key_env_var: str | None = Field(
        default=None,
        description=(
            "Name of the environment variable holding the key (e.g. OPENROUTER_API_KEY); it "
            "must be set. Instead of api_key, for any base_url."
        ),
    )
    organization: str | None = Field(
        default=None, description="OpenAI organization id, sent as the OpenAI-Organization header."
    )
    project: str | None = Field(
        default=None, description="OpenAI project id, sent as the OpenAI-Project header."
    )
    stream_usage: bool = Field(
        default=True,
        description=(
            'Ask for token usage at the end of a stream (stream_options: {"include_usage": '
            "true}). Turn it off for servers that reject stream_options."
        ),
    )
    system_role: Literal["system", "developer"] = Field(
        default="system",
        description="Role of system messages on the wire; some reasoning models want 'developer'.",
    )

    _key_source: str = PrivateAttr(default="")

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        value = value.strip()
        if _AMBIGUOUS_URL_CHARS.search(value):
            raise ValueError("must not contain backslashes, spaces or control characters")
        parts = urlsplit(value)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            # The value is not repeated: a mangled URL may hold credentials.
            raise ValueError(
                f"is not an http(s) URL (e.g. {DEFAULT_BASE_URL} or http://localhost:11434/v1)"
            )
        if "@" in parts.netloc:
            raise ValueError("must not contain credentials (user:password@); use api_key")
        try:
            parts.port  # noqa: B018 - raises on a malformed port
        except ValueError as exc:
            raise ValueError(f"invalid port: {exc}") from None
        return value

    @field_validator("api_key_env_var")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    # Same name as the base class's validator, so this one replaces it.
    @model_validator(mode="after")
    def _key(self, info: ValidationInfo) -> OpenAIOptions:
        if self.api_key is not None and self.api_key_env_var is not None:
            raise ValueError("set api_key or api_key_env_var, not both")
        if self.api_key is None and replaying(info):
            # cache.mode replay: answers come from the cache, the API is never called.
            self._key_source = ""
            return self
        if self.is_openai:
            self._key_for_openai()
        else:
            self._key_for_other_server()
        return self

    def _key_for_openai(self) -> None:
        if self.api_key_env_var is not None:
            self.api_key = self._key_from_variable(self.api_key_env_var)
            self._key_source = self.api_key_env_var
            return
        configured = self.api_key is not None
        self.api_key = resolve_api_key(self.api_key, self.api_key_env)
        self._key_source = "api_key" if configured else self.api_key_env[0]

    def _key_for_other_server(self) -> None:
        if self.api_key_env_var is not None:
            self.api_key = self._key_from_variable(self.api_key_env_var)
            self._key_source = self.api_key_env_var
            return
        if self.api_key is None or not self.api_key.get_secret_value().strip():
            # "${MY_KEY:}" with MY_KEY unset means: no key.
            self.api_key = None
            self._key_source = ""
            return
        if looks_like_placeholder(self.api_key.get_secret_value()):
            raise ValueError(
                "the configured api_key is a placeholder; give the server's real key "
                "(as ${VAR}), or leave api_key out if the server needs none"
            )
        self._key_source = "api_key"

    @staticmethod
    def _key_from_variable(name: str) -> SecretStr:
        value = os.environ.get(name, "").strip()
        if not value:
            raise ValueError(f"api_key_env_var names {name}, which is not set")
        if looks_like_placeholder(value):
            raise ValueError(f"{name} holds a placeholder, not a real API key")
        return SecretStr(value)

    @property
    def is_openai(self) -> bool:
        """True when ``base_url`` is OpenAI's own API."""
        return is_openai_url(self.base_url)

    @property
    def key_hint(self) -> str:
        """What to check when the server rejects the key (used in 401/403 messages)."""
        if self._key_source:
            return self._key_source
        return (
            "api_key or api_key_env_var: none is configured, and OPENAI_API_KEY is never "
            "sent to a base_url other than OpenAI's"
        )
