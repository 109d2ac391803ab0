"""The ``tools_shell`` config section: limits of the shell tools."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The config section this plugin owns.
SECTION = "tools_shell"
#: Longest command accepted, in characters (Linux refuses one argument over 128 KiB).
MAX_COMMAND_CHARS = 16_384


class ShellSettings(BaseModel):
    """Limits of ``run_shell``, ``shell_status`` and ``shell_kill`` (section ``tools_shell``)."""

    model_config = ConfigDict(extra="forbid")

    max_output_bytes: int = Field(
        default=32_768,
        ge=1_024,
        le=10_000_000,
        description="Output kept of one command: per stream (stdout, stderr) in the foreground, "
        "the last bytes of the combined output of a background job. The rest is dropped and a "
        "marker says how much.",
    )
    default_timeout_seconds: float = Field(
        default=60.0, gt=0, description="Timeout of a foreground command that names none."
    )
    max_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Longest timeout a foreground command may ask for (tools.timeout_seconds "
        "bounds it too).",
    )
    background_timeout_seconds: float = Field(
        default=600.0,
        gt=0,
        description="Lifetime of a background job that names no timeout; then it is killed.",
    )
    max_background_timeout_seconds: float = Field(
        default=3_600.0,
        gt=0,
        description="Longest lifetime a background job may ask for: nothing runs forever.",
    )
    max_background_jobs: int = Field(
        default=4,
        ge=0,
        le=64,
        description="Background jobs one session may have running at once (0: no background mode).",
    )

    @model_validator(mode="after")
    def _defaults_within_limits(self) -> ShellSettings:
        if self.default_timeout_seconds > self.max_timeout_seconds:
            raise ValueError("default_timeout_seconds is larger than max_timeout_seconds")
        if self.background_timeout_seconds > self.max_background_timeout_seconds:
            raise ValueError(
                "background_timeout_seconds is larger than max_background_timeout_seconds"
            )
        return self


def settings_from(config: Any) -> ShellSettings:
    """The section of an agent's config (defaults when absent), within ``tools.timeout_seconds``.

    A foreground command may not ask for longer than the agent lets one tool call
    run: the loop would cancel it first, with a less telling message.
    """
    section = config.section(SECTION) if config is not None else None
    settings = section if isinstance(section, ShellSettings) else ShellSettings()
    call_limit = getattr(getattr(config, "tools", None), "timeout_seconds", None)
    if call_limit is not None and call_limit < settings.max_timeout_seconds:
        settings = settings.model_copy(
            update={
                "max_timeout_seconds": call_limit,
                "default_timeout_seconds": min(settings.default_timeout_seconds, call_limit),
            }
        )
    return settings
