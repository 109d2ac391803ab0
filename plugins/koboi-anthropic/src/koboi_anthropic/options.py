"""The options of the ``anthropic`` provider: the ``llm:`` section minus ``provider``.

Only pydantic (through ``koboi_http.options``) here, so the plugin module can
register the model without importing httpx.
"""

from __future__ import annotations

import os
from typing import ClassVar

from pydantic import Field, SecretStr, ValidationInfo, model_validator

from koboi_http.keys import looks_like_placeholder, resolve_api_key
from koboi_http.options import HTTPProviderOptions, replaying

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096
ANTHROPIC_VERSION = "2023-06-01"

API_KEY_ENV = "ANTHROPIC_API_KEY"
AUTH_TOKEN_ENV = "ANTHROPIC_AUTH_TOKEN"


def _env_is_set(name: str) -> bool:
    return bool(os.environ.get(name, "").strip())


class AnthropicOptions(HTTPProviderOptions):
    """Options of the ``anthropic`` provider (Claude through the Messages API).

    The credential is an API key (sent as ``x-api-key``) **or** an OAuth
    bearer token (sent as ``Authorization: Bearer``), never both. Each comes
    from the config (``api_key``/``auth_token``, written as ``${VAR}``) or
    else from ``ANTHROPIC_API_KEY``/``ANTHROPIC_AUTH_TOKEN``.
    """

    api_key_env: ClassVar[tuple[str, ...]] = (API_KEY_ENV,)
    #: Environment variables holding an OAuth bearer token, in order of preference.
    auth_token_env: ClassVar[tuple[str, ...]] = (AUTH_TOKEN_ENV,)

    model: str = Field(description="Claude model name, as the API spells it (claude-sonnet-4-5).")
    base_url: str = Field(
        default=DEFAULT_BASE_URL,
        description="API root URL (requests go to {base_url}/v1/messages); point it at any "
        "server that speaks the Messages API.",
    )
    api_key: SecretStr | None = Field(
        default=None,
        description=f"API key, sent as x-api-key; default: {API_KEY_ENV}. Write it as "
        f"${{{API_KEY_ENV}}}, never inline. Leave it out when auth_token is used.",
    )
    auth_token: SecretStr | None = Field(
        default=None,
        description=f"OAuth bearer token, sent as 'Authorization: Bearer' instead of an API key; "
        f"default: {AUTH_TOKEN_ENV}. Write it as ${{{AUTH_TOKEN_ENV}}}, never inline.",
    )
    max_tokens: int = Field(
        default=DEFAULT_MAX_TOKENS,
        ge=1,
        description="Most tokens the model may generate in one reply (the API requires a limit); "
        "'max_tokens' in options or in a request's options overrides it.",
    )
    anthropic_version: str = Field(
        default=ANTHROPIC_VERSION, description="Value of the anthropic-version header."
    )

    # Same name as the base class's validator, so it replaces it: the base
    # knows only API keys.
    @model_validator(mode="after")
    def _key(self, info: ValidationInfo) -> AnthropicOptions:
        if self.api_key is not None and self.auth_token is not None:
            raise ValueError(
                "both api_key and auth_token are set; set only one (an API key is sent as "
                "x-api-key, an OAuth token as Authorization: Bearer)"
            )
        if self.api_key is not None:
            self.api_key = resolve_api_key(self.api_key, self.api_key_env)
            return self
        if self.auth_token is not None:
            if looks_like_placeholder(self.auth_token.get_secret_value()):
                raise ValueError(
                    f"the configured auth_token is a placeholder; put the real token in "
                    f"{AUTH_TOKEN_ENV} and write auth_token: ${{{AUTH_TOKEN_ENV}}}, or leave "
                    "auth_token out"
                )
            return self
        has_key = any(_env_is_set(name) for name in self.api_key_env)
        has_token = any(_env_is_set(name) for name in self.auth_token_env)
        if has_key and has_token:
            raise ValueError(
                f"both {API_KEY_ENV} and {AUTH_TOKEN_ENV} are set, and only one may be used; "
                f"unset one, or choose in the config with api_key: ${{{API_KEY_ENV}}} or "
                f"auth_token: ${{{AUTH_TOKEN_ENV}}}"
            )
        if has_token:
            self.auth_token = resolve_api_key(None, self.auth_token_env, what="auth token")
        elif has_key:
            self.api_key = resolve_api_key(None, self.api_key_env)
        elif replaying(info):
            # cache.mode replay: answers come from the cache, the API is never called.
            return self
        else:
            raise ValueError(
                f"no credential: set {API_KEY_ENV} (an API key) or {AUTH_TOKEN_ENV} (an OAuth "
                "token), or api_key / auth_token in this provider's config"
            )
        return self

    @property
    def key_hint(self) -> str:
        """The variable that holds the credential in use, for messages."""
        if self.auth_token is not None:
            return " or ".join(self.auth_token_env)
        return " or ".join(self.api_key_env)
