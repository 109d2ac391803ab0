"""Config models of webhooks: the dispatcher's settings and one endpoint (config or per job).

The server embeds :class:`WebhookSettings` in its own config section (e.g.
``server.webhooks``) and validates a per-job webhook given in a request body
with :class:`WebhookEndpoint`. Only pydantic here; the dispatcher (httpx) is
imported when :meth:`WebhookSettings.dispatcher` is called.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from koboi_server.webhooks.errors import WebhookError
from koboi_server.webhooks.signing import secret_key
from koboi_server.webhooks.url_guard import WebhookURLPolicy, parse_allow_list, parse_webhook_url

if TYPE_CHECKING:
    from koboi.store import Store
    from koboi_server.webhooks.dispatcher import WebhookDispatcher

_PATTERN = re.compile(r"\*|[A-Za-z0-9][A-Za-z0-9._:-]{0,127}(\.\*)?")


class WebhookEndpoint(BaseModel):
    """A receiver of webhook events: where, signed with what, for which event types."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        description=(
            "http(s) URL the events are POSTed to. Loopback, private, link-local and metadata "
            "addresses are refused unless the webhooks allow-list covers them (metadata "
            "addresses always). Checked when the config loads (koboi validate) for an address, "
            "localhost or a name of the allow-list; a name that needs DNS is resolved and "
            "checked when koboi serve starts (a refused address stops it); every address is "
            "checked again before each attempt."
        )
    )
    secrets: list[SecretStr] = Field(
        min_length=1,
        max_length=5,
        description=(
            "Signing secrets ('whsec_<base64>', e.g. from koboi_server.webhooks."
            "generate_secret()). Each delivery carries one signature per secret: while "
            "rotating, list the new and the old one until the receiver uses the new."
        ),
    )
    events: list[str] = Field(
        default_factory=lambda: ["*"],
        min_length=1,
        description=(
            "Event types sent to this endpoint: exact names ('job.finished'), a family "
            "('job.*') or '*' for all."
        ),
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        try:
            return str(parse_webhook_url(value))
        except WebhookError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, values: list[SecretStr]) -> list[SecretStr]:
        for value in values:
            try:
                secret_key(value.get_secret_value())
            except WebhookError as exc:
                raise ValueError(str(exc)) from None
        return values

    @field_validator("events")
    @classmethod
    def _events(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _PATTERN.fullmatch(value):
                raise ValueError(
                    f"{value!r} is not an event type pattern; write 'job.finished', 'job.*' or '*'"
                )
        return values

    def matches(self, event_type: str) -> bool:
        """Does this endpoint want ``event_type``?"""
        for pattern in self.events:
            if pattern == "*" or pattern == event_type:
                return True
            if pattern.endswith(".*") and event_type.startswith(pattern[:-1]):
                return True
        return False

    def secret_values(self) -> list[str]:
        """The secrets as text, for :meth:`WebhookDispatcher.enqueue`."""
        return [s.get_secret_value() for s in self.secrets]


class WebhookSettings(BaseModel):
    """How webhooks are checked, sent and retried, and the endpoints every event goes to."""

    model_config = ConfigDict(extra="forbid")

    allow: list[str] = Field(
        default_factory=list,
        description=(
            "Receivers that are not on public addresses and may be called anyway (intranet): "
            "CIDR networks ('10.20.0.0/16'), addresses, host names ('hooks.corp') or "
            "suffixes ('*.corp'). Cloud metadata addresses stay refused."
        ),
    )
    endpoints: list[WebhookEndpoint] = Field(
        default_factory=list,
        description="Endpoints that receive events of every job (per-job webhooks add to these). "
        "Their URLs are checked against the address rules and allow: when the config loads "
        "for what needs no DNS, at start-up for the rest.",
    )
    max_attempts: int = Field(
        default=15, ge=1, le=100, description="Attempts before a delivery is marked failed."
    )
    backoff_base: float = Field(
        default=5.0, ge=0, le=3600, description="Seconds before the second attempt."
    )
    backoff_factor: float = Field(
        default=3.0, ge=1, le=10, description="Each further wait is this many times longer."
    )
    backoff_cap: float = Field(
        default=3600.0, gt=0, le=86400, description="Longest wait between two attempts, seconds."
    )
    backoff_jitter: float = Field(
        default=0.2, ge=0, le=1, description="Random spread of each wait, as a fraction of it."
    )
    timeout: float = Field(
        default=15.0, gt=0, le=120, description="Seconds one attempt may take in all."
    )
    connect_timeout: float = Field(
        default=5.0, gt=0, le=60, description="Seconds to establish one connection."
    )
    retention_days: float | None = Field(
        default=7.0,
        gt=0,
        description="Days a delivered or failed delivery stays readable; null keeps them forever.",
    )
    poll_interval: float = Field(
        default=1.0, gt=0, le=60, description="Seconds between two looks for due deliveries."
    )
    concurrency: int = Field(
        default=8, ge=1, le=256, description="Attempts one replica sends at the same time."
    )

    @field_validator("allow")
    @classmethod
    def _allow(cls, values: list[str]) -> list[str]:
        try:
            parse_allow_list(values)
        except WebhookError as exc:
            raise ValueError(str(exc)) from None
        return values

    @field_validator("endpoints")
    @classmethod
    def _endpoints(
        cls, values: list[WebhookEndpoint], info: ValidationInfo
    ) -> list[WebhookEndpoint]:
        """Refuse, when the config loads, the endpoints whose verdict needs no DNS lookup."""
        allow = info.data.get("allow")
        if allow is None:
            return values  # allow itself is invalid: that error is reported already
        policy = WebhookURLPolicy(allow)
        problems: list[InitErrorDetails] = []
        for index, endpoint in enumerate(values):
            try:
                policy.check_without_dns(endpoint.url)
            except WebhookError as exc:
                error = PydanticCustomError("webhook_refused", "{reason}", {"reason": str(exc)})
                problems.append({"type": error, "loc": (index, "url"), "input": endpoint.url})
        if problems:
            # Raised as a ValidationError so each problem keeps its own key path
            # (server.webhooks.endpoints.<n>.url).
            raise ValidationError.from_exception_data("WebhookSettings", problems)
        return values

    def endpoints_for(self, event_type: str) -> list[WebhookEndpoint]:
        """The configured endpoints that want ``event_type``."""
        return [e for e in self.endpoints if e.matches(event_type)]

    def dispatcher(self, store: Store, **overrides: Any) -> WebhookDispatcher:
        """A :class:`WebhookDispatcher` on ``store`` with these settings (``overrides`` win)."""
        from koboi_server.webhooks.delivery import Backoff
        from koboi_server.webhooks.dispatcher import WebhookDispatcher

        options: dict[str, Any] = {
            "allow": self.allow,
            "max_attempts": self.max_attempts,
            "backoff": Backoff(
                base=self.backoff_base,
                factor=self.backoff_factor,
                cap=max(self.backoff_cap, self.backoff_base),
                jitter=self.backoff_jitter,
            ),
            "timeout": self.timeout,
            "connect_timeout": self.connect_timeout,
            "retention": None if self.retention_days is None else self.retention_days * 86400,
            "poll_interval": self.poll_interval,
            "concurrency": self.concurrency,
        }
        options.update(overrides)
        return WebhookDispatcher(store, **options)
