"""The options of the ``cloudflare`` provider: the ``llm:`` section minus ``provider``.

Only pydantic and ``koboi_http.options`` here (no httpx), so the plugin module
can register the model without importing the HTTP stack.
"""

from __future__ import annotations

import os
import re
from typing import ClassVar

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from koboi_http.keys import looks_like_placeholder, resolve_api_key
from koboi_http.options import HTTPProviderOptions, replaying

DEFAULT_BASE_URL = "https://api.cloudflare.com/client/v4"
TOKEN_ENV = "CLOUDFLARE_API_TOKEN"
ACCOUNT_ENV = "CLOUDFLARE_ACCOUNT_ID"

_ACCOUNT_ID = re.compile(r"^[0-9a-fA-F]{32}$")
# A model name is a path below /ai/run/ (``@cf/meta/llama-3.3-70b-instruct-fp8-fast``):
# segments of URL-safe characters, no empty, "." or ".." segment, nothing that would
# end the path (?, #) or need escaping.
_MODEL_SEGMENT = re.compile(r"^[A-Za-z0-9@._:+~-]+$")
#: Body keys the provider writes itself; ``options`` may not set them.
RESERVED_BODY_KEYS = frozenset({"messages", "prompt", "stream", "tools"})


class CloudflareOptions(HTTPProviderOptions):
    """Options of the Cloudflare Workers AI provider (native ``/ai/run/{model}`` endpoint)."""

    api_key_env: ClassVar[tuple[str, ...]] = (TOKEN_ENV,)
    reserved_options: ClassVar[frozenset[str]] = RESERVED_BODY_KEYS

    model: str = Field(
        description="Workers AI model name, e.g. '@cf/meta/llama-3.3-70b-instruct-fp8-fast'; "
        "it becomes the end of the URL path as written."
    )
    base_url: str = Field(
        default=DEFAULT_BASE_URL,
        description="Cloudflare API root; calls go to "
        "{base_url}/accounts/{account_id}/ai/run/{model}.",
    )
    api_key: SecretStr | None = Field(
        default=None,
        validate_default=True,
        description=f"Cloudflare API token with Workers AI permission; default: {TOKEN_ENV}. "
        f"Write it as ${{{TOKEN_ENV}}}, never inline.",
    )
    account_id: str = Field(
        default="",
        validate_default=True,
        description=f"Cloudflare account id (32 hexadecimal characters); default: {ACCOUNT_ENV}.",
    )

    @field_validator("api_key")
    @classmethod
    def _token(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        # Resolved here, at the field, so that a missing token and a missing
        # account id are reported together; the base class's own check then
        # sees a configured token and passes it through. An empty value (what
        # an unset ${VAR} leaves) counts as none given.
        if value is not None and not value.get_secret_value().strip():
            value = None
        if value is None and replaying(info):
            return None  # cache.mode replay: the API is never called
        return resolve_api_key(value, cls.api_key_env, what="API token")

    @field_validator("account_id")
    @classmethod
    def _account(cls, value: str, info: ValidationInfo) -> str:
        value = value.strip()
        source = "account_id"
        if not value:
            value = os.environ.get(ACCOUNT_ENV, "").strip()
            source = ACCOUNT_ENV
            if not value and replaying(info):
                return ""  # cache.mode replay: the API is never called
            if not value:
                raise ValueError(
                    f"no Cloudflare account id: set {ACCOUNT_ENV}, or account_id in this "
                    "provider's config"
                )
        # The value is never echoed: a token pasted into the wrong variable
        # must not end up in an error message.
        if looks_like_placeholder(value) or not _ACCOUNT_ID.match(value):
            what = "is a placeholder" if looks_like_placeholder(value) else "is not one"
            raise ValueError(
                f"{source} must be a Cloudflare account id, 32 hexadecimal characters "
                f"(the one in your dashboard's URL), and {what} "
                f"({len(value)} characters given)"
            )
        return value.lower()

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        segments = value.split("/")
        if not value or not all(_MODEL_SEGMENT.match(s) and s not in (".", "..") for s in segments):
            raise ValueError(
                f"{value!r} is not a Workers AI model name "
                "(expected something like '@cf/meta/llama-3.3-70b-instruct-fp8-fast')"
            )
        return value
