"""The ``console`` config section.

The server's own section (``server``) forbids keys it does not know, and the
server knows no capability by name, so the console has a section of its own:
``console: {}`` turns it on for ``koboi serve``. Only pydantic here: the section
is registered while plugins load.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SECTION = "console"
#: Where the console's pages live on the server (outside /v1, where API keys are checked).
PREFIX = "/console"


class ConsoleSettings(BaseModel):
    """A web console on koboi serve (koboi-console)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Serve the console at /console on koboi serve. false: the section is "
        "kept but nothing is served.",
    )
    login_seconds: float = Field(
        default=8 * 3600,
        gt=0,
        le=30 * 86400,
        description="How long a login lasts (then the API key is asked again). Revoking the "
        "key ends its logins at once, whatever this says.",
    )
    secure_cookie: bool | None = Field(
        default=None,
        description="Mark the login cookie Secure (sent over HTTPS only). Default: on, "
        "unless server.host is a loopback address (a browser on the same machine over "
        "plain HTTP). Behind a TLS-terminating proxy leave it on.",
    )


def settings_of(section: object) -> ConsoleSettings | None:
    """The section when it is there and enabled, else None (the console is off)."""
    if isinstance(section, ConsoleSettings) and section.enabled:
        return section
    return None
