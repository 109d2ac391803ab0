"""Build one agent's governance from its config: the redactor and the interceptors."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, SecretStr

from koboi.interceptors import Interceptor
from koboi_governance.detect import secrets_from_env
from koboi_governance.pipeline import (
    DecisionStage,
    InputGuard,
    OutputGuard,
    RateLimitStage,
    RedactionProvider,
)
from koboi_governance.redact import Redactor, literal_problem
from koboi_governance.settings import GovernanceSection, settings_from


def config_secrets(config: Any) -> Iterator[str]:
    """Every SecretStr value of the config's provider and plugin option models."""
    seen: list[Any] = [*getattr(config, "provider_options", {}).values()]
    seen.append(getattr(config, "llm_options", None))
    seen.extend(getattr(config, "sections", {}).values())
    seen.append(getattr(config, "sandbox_options", None))
    for model in seen:
        yield from _secret_values(model)


def _secret_values(value: Any) -> Iterator[str]:
    if isinstance(value, SecretStr):
        yield value.get_secret_value()
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _secret_values(getattr(value, name, None))
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _secret_values(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _secret_values(item)


def build_redactor(
    settings: GovernanceSection, config: Any, environ: Mapping[str, str] | None = None
) -> Redactor:
    redaction = settings.redaction
    literals = {s.get_secret_value() for s in redaction.secrets}
    literals.update(config_secrets(config))
    if redaction.from_environment:
        literals.update(secrets_from_env(os.environ if environ is None else environ))
    # Values the redactor cannot mask safely as literals (shorter than 6 characters: they
    # would mask ordinary words) are left to the detectors; the config's own secrets
    # are checked when the config is validated, so those are never dropped silently.
    usable = sorted(s for s in literals if literal_problem(s) is None)
    return Redactor(
        literals=usable,
        kinds=None if redaction.detect else (),
        pii=settings.guardrails.output.pii != "off",
    )


def interceptors(config: Any) -> list[Interceptor]:
    settings = settings_from(config)
    redactor = build_redactor(settings, config)
    stages: list[Interceptor] = [
        DecisionStage(settings, redactor),
        InputGuard(settings),
        OutputGuard(settings, redactor),
        RedactionProvider(redactor),
    ]
    if settings.rate_limits:
        stages.append(RateLimitStage(settings.rate_limits))
    return stages
