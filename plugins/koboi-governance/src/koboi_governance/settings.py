"""The ``governance`` config section: policy rules, guardrails, trust, rate limits, redaction.

Every part has a safe default, so an agent without the section is governed by
its mode (``agent.mode``), deny-by-default approvals, secret redaction and the
audit trail. Modes themselves live in the kernel's ``agent`` section because
they are the first thing a reader of a config should see.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from koboi_governance.policy import PolicySection

SECTION = "governance"

GuardAction = Literal["off", "warn", "block"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputGuardrails(_Section):
    """Checks on what enters the run: the user's message, and the arguments of tool calls."""

    max_chars: int | None = Field(
        default=100_000,
        gt=0,
        description="Longest user message accepted; a longer one fails the run before any "
        "model call. None for no limit.",
    )
    deny_patterns: list[str] = Field(
        default_factory=list,
        description="Regular expressions (Python syntax, searched case-insensitively): a user "
        "message or tool argument matching one is refused.",
    )
    injection: GuardAction = Field(
        default="warn",
        description="Prompt-injection heuristics on the user message: block fails the run, "
        "warn records a guardrail event and lets it through, off skips the check.",
    )
    secrets_in_arguments: GuardAction = Field(
        default="off",
        description="A tool call whose arguments contain a detected secret: block refuses it, "
        "warn records it. Off by default: some tools legitimately carry credentials.",
    )

    @field_validator("deny_patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"deny_patterns: {pattern!r} is not a valid regex: {exc}"
                ) from None
        return patterns


class OutputGuardrails(_Section):
    """Checks on what tools return and what the model writes."""

    secrets: GuardAction = Field(
        default="warn",
        description="A detected secret in a tool result or in the model's answer: block "
        "withholds the whole content, warn masks the value (it is never shown or stored) and "
        "adds a note; off leaves it (the journal and events are still redacted).",
    )
    pii: GuardAction = Field(
        default="off",
        description="Personal data (e-mail, phone, card, IBAN, SSN) in a tool result or "
        "answer: block withholds the content, warn masks each value.",
    )
    injection: GuardAction = Field(
        default="warn",
        description="Instructions hidden in a tool result (fetched pages, files): warn adds a "
        "note telling the model not to follow them, block withholds the content.",
    )


class Guardrails(_Section):
    input: InputGuardrails = Field(
        default_factory=InputGuardrails,
        description="Checks on the user's message and on tool arguments.",
    )
    output: OutputGuardrails = Field(
        default_factory=OutputGuardrails, description="Checks on tool results and on model answers."
    )


class TrustSettings(_Section):
    """The trust database: approvals given with the scope 'always'."""

    enabled: bool = Field(
        default=True,
        description="Turn 'always' approvals into stored trust rules that skip the prompt for "
        "the same tool and arguments.",
    )
    ttl_seconds: float = Field(
        default=30 * 24 * 3600.0,
        gt=0,
        description="How long a trust rule made from an 'always' approval lasts.",
    )


class RateLimit(_Section):
    """How often one tool may run."""

    per_session: int | None = Field(
        default=None, ge=0, description="Most calls of the tool in one session (0: never)."
    )
    per_minute: int | None = Field(
        default=None,
        ge=0,
        description="Most calls of the tool per calendar minute, over every session sharing "
        "the store (0: never).",
    )


class RedactionSettings(_Section):
    """What is masked in the journal, audit trail, events and logs."""

    @field_validator("secrets")
    @classmethod
    def _maskable(cls, secrets: list[SecretStr]) -> list[SecretStr]:
        from koboi_governance.redact import literal_problem

        for index, secret in enumerate(secrets):
            problem = literal_problem(secret.get_secret_value())
            if problem is not None:
                raise ValueError(f"secrets[{index}]: {problem}")
        return secrets

    secrets: list[SecretStr] = Field(
        default_factory=list,
        description="Values to mask wherever they appear (write them as ${VAR}); at least 6 "
        "characters each.",
    )
    from_environment: bool = Field(
        default=True,
        description="Also mask the values of environment variables whose names say they hold "
        "a secret (…_API_KEY, …_TOKEN, …_PASSWORD…).",
    )
    detect: bool = Field(
        default=True,
        description="Also mask anything that looks like a credential (API keys, tokens, "
        "private keys, passwords in URLs or assignments).",
    )


class GovernanceSection(_Section):
    """Governance of tool calls: the stages after the mode (see docs/governance.md)."""

    policy: PolicySection = Field(
        default_factory=PolicySection,
        description="Allow / ask / deny rules by tool name and argument patterns.",
    )
    guardrails: Guardrails = Field(
        default_factory=Guardrails, description="Input and output checks."
    )
    trust: TrustSettings = Field(
        default_factory=TrustSettings, description="The trust database ('always' approvals)."
    )
    rate_limits: dict[str, RateLimit] = Field(
        default_factory=dict,
        description="Per tool name ('*' for every tool without its own entry): calls per "
        "session and per minute. Counters live in the store and survive a restart.",
    )
    redaction: RedactionSettings = Field(
        default_factory=RedactionSettings, description="Masking of secrets."
    )

    @model_validator(mode="before")
    @classmethod
    def _none_is_default(cls, data: Any) -> Any:
        return {} if data is None else data


def settings_from(config: Any) -> GovernanceSection:
    """The agent's governance settings (the defaults when the section is absent)."""
    section = config.section(SECTION) if config is not None else None
    return section if isinstance(section, GovernanceSection) else GovernanceSection()
