"""Options every HTTP model provider accepts."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from koboi_http.keys import resolve_api_key


def replaying(info: ValidationInfo) -> bool:
    """True when the config is validated for ``cache.mode: replay``.

    Every answer then comes from the response cache and the provider is never
    called, so a missing key is not an error: a recorded run replays on a
    machine that has no key at all.
    """
    context = info.context
    return isinstance(context, dict) and context.get("cache_mode") == "replay"


class HTTPProviderOptions(BaseModel):
    """Base of a provider's options model. Subclasses set ``api_key_env`` and defaults.

    ``api_key`` is filled from the first of ``api_key_env`` that is set when
    the config gives none; a missing or placeholder key fails validation with
    a message naming the variable (except under ``cache.mode: replay``, see
    :func:`replaying`, where ``api_key`` may stay None). Set
    ``api_key_required = False`` for servers that take no key (a local vLLM
    or Ollama).
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    #: Environment variables holding the key, in order of preference.
    api_key_env: ClassVar[tuple[str, ...]] = ()
    #: Whether a call without a key makes sense at all.
    api_key_required: ClassVar[bool] = True
    #: Body keys the provider writes itself, which ``options`` may not set.
    reserved_options: ClassVar[frozenset[str]] = frozenset()

    model: str = Field(description="Model name, as the API spells it.")
    base_url: str = Field(description="API root URL; point it at any compatible server.")
    api_key: SecretStr | None = Field(
        default=None,
        description="API key; default: the provider's usual environment variable. "
        "Write it as ${VAR}, never inline.",
    )
    timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Longest wait for the server to send anything (the first byte, or the next "
        "chunk of a stream) before the attempt counts as failed.",
    )
    connect_timeout_seconds: float = Field(
        default=10.0, gt=0, description="Longest wait to open a connection."
    )
    max_retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Retries after a connection error, a timeout, 408, 409, 429 or a 5xx.",
    )
    retry_initial_delay: float = Field(
        default=0.5, ge=0, description="Backoff ceiling of the first retry, in seconds."
    )
    retry_max_delay: float = Field(
        default=8.0, ge=0, description="Largest backoff between retries, in seconds."
    )
    max_retry_after_seconds: float = Field(
        default=60.0,
        ge=0,
        description="A Retry-After longer than this is not waited for; the call fails instead.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra HTTP headers sent with every request."
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Sent as-is in the request body (temperature, top_p, seed, stop, max_tokens, "
        "reasoning_effort...); a request's own options override them.",
    )

    @field_validator("options")
    @classmethod
    def _not_reserved(cls, value: dict[str, Any]) -> dict[str, Any]:
        reserved = sorted(cls.reserved_options & value.keys())
        if reserved:
            raise ValueError(
                f"options may not set {', '.join(reserved)}: the provider writes them itself "
                "from the model, the conversation, the tools and the stream setting"
            )
        return value

    @model_validator(mode="after")
    def _key(self, info: ValidationInfo) -> HTTPProviderOptions:
        if not self.api_key_env:
            return self
        if self.api_key is None and replaying(info):
            return self
        if self.api_key_required or self.api_key is not None:
            self.api_key = resolve_api_key(self.api_key, self.api_key_env)
        return self

    @property
    def key_hint(self) -> str:
        """Where the key came from, for messages: a variable name or ``api_key``."""
        return " or ".join(self.api_key_env) if self.api_key_env else "api_key"
