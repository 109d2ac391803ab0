"""The ``mcp:`` config section: MCP servers by name, and how their tools are offered.

Only pydantic and the standard library here: the section is registered while
plugins load, and the SDK is imported only when an agent connects.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from koboi.config import NAMESPACE_PATTERN
from koboi.tools import Risk

SECTION = "mcp"

#: What a stdio server gets from koboi's environment unless its config names others:
#: nothing that could hold a credential.
DEFAULT_PASS_ENV: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")

_SERVER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class BearerAuth(BaseModel):
    """A static bearer token, read from an environment variable when connecting."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["bearer"] = "bearer"
    token_env: str = Field(
        description="The environment variable holding the token (sent as 'Authorization: "
        "Bearer ...'; never logged, journaled or shown)."
    )


class ClientCredentialsAuth(BaseModel):
    """OAuth 2 client credentials (machine to machine): tokens fetched, refreshed and fetched
    again on a 401 by the MCP SDK, from the authorization server the MCP server names."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["client_credentials"] = "client_credentials"
    client_id: str = Field(description="The OAuth client id.")
    client_secret: SecretStr = Field(
        description="The client secret; write it as ${VARIABLE} so it stays out of the file."
    )
    scope: str | None = Field(default=None, description="Space-separated scopes to ask for.")
    issuer: str | None = Field(
        default=None,
        description="The authorization server that issued the credentials: tokens are asked "
        "only of the server whose metadata names exactly this issuer.",
    )
    token_endpoint_auth_method: Literal["client_secret_basic", "client_secret_post"] = Field(
        default="client_secret_basic", description="How the secret is sent to the token endpoint."
    )


class AuthorizationCodeAuth(BaseModel):
    """OAuth 2 authorization code with PKCE and dynamic client registration: a person logs
    in once with ``koboi mcp login NAME``; the tokens (and the registered client) are kept
    in the store and refreshed when they expire."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["authorization_code"] = "authorization_code"
    scope: str | None = Field(default=None, description="Space-separated scopes to ask for.")
    client_id: str | None = Field(
        default=None,
        description="A client registered beforehand with the authorization server (no "
        "dynamic registration then).",
    )
    client_secret: SecretStr | None = Field(
        default=None, description="That client's secret, if it has one (write ${VARIABLE})."
    )
    client_name: str = Field(default="koboi", description="The name koboi registers itself under.")
    redirect_port: int = Field(
        default=33418,
        ge=1024,
        le=65535,
        description="The port of the one-shot callback server on 127.0.0.1 that receives the "
        "authorization code during 'koboi mcp login'.",
    )


class NoAuth(BaseModel):
    """No authentication."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["none"] = "none"


AuthSettings = NoAuth | BearerAuth | ClientCredentialsAuth | AuthorizationCodeAuth


class ServerSettings(BaseModel):
    """One MCP server: how to reach it and which of its tools the agent gets."""

    model_config = ConfigDict(extra="forbid")

    transport: Literal["stdio", "http"] = Field(
        default="stdio",
        description="stdio: a command started in the agent's sandbox, speaking MCP on its "
        "stdin/stdout. http: a streamable HTTP endpoint (url).",
    )
    enabled: bool = Field(default=True, description="false: the server is left alone.")
    command: str | None = Field(default=None, description="stdio: the program to start.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    cwd: str | None = Field(
        default=None,
        description="stdio: where it starts (relative to the config file); default the "
        "sandbox's shared working directory.",
    )
    pass_env: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PASS_ENV),
        description="stdio: the variables of koboi's environment the server gets (when set). "
        "Nothing else is inherited, credentials least of all: name a variable here to pass "
        "it. An isolating sandbox may drop credential-named variables still.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="stdio: variables set for the server (write a secret as ${VARIABLE}).",
    )
    url: str | None = Field(default=None, description="http: the MCP endpoint's URL.")
    headers: dict[str, str] = Field(
        default_factory=dict, description="http: headers sent with every request."
    )
    allow_private: bool = Field(
        default=False,
        description="http: the server may be on a loopback, private or link-local address "
        "(the SSRF guard refuses those otherwise). Cloud metadata addresses stay refused.",
    )
    auth: AuthSettings = Field(
        default_factory=NoAuth,
        discriminator="type",
        description="http: none, bearer, client_credentials or authorization_code.",
    )
    namespace: str | None = Field(
        default=None,
        description="The namespace this server's tools are offered in, as "
        "<namespace>__<tool> (default: mcp.namespace with {server} replaced by the server's "
        "name).",
    )
    allow: list[str] | None = Field(
        default=None,
        description="Only these of the server's tools (their names on the server). Default: all.",
    )
    deny: list[str] = Field(
        default_factory=list, description="None of these tools (their names on the server)."
    )
    risk: dict[str, Risk] = Field(
        default_factory=dict,
        description="Risk of a tool (by its name on the server), instead of the one its "
        "annotations give (readOnlyHint: safe, destructiveHint: destructive, else moderate).",
    )
    idempotent: dict[str, bool] = Field(
        default_factory=dict,
        description="Whether a tool may be run again after a crash, instead of its idempotentHint.",
    )
    resources: bool = Field(
        default=True,
        description="Offer <namespace>__list_resources and <namespace>__read_resource when the server "
        "has resources.",
    )
    prompts: bool = Field(
        default=True,
        description="Offer <namespace>__list_prompts and <namespace>__get_prompt when the server has "
        "prompts.",
    )
    elicitation: Literal["suspend", "terminal", "decline"] = Field(
        default="suspend",
        description="When the server asks the user something during a call: suspend the run "
        "until someone replies (the reply is the answer), ask at the terminal (when there is "
        "one, else suspend), or decline.",
    )
    log_level: (
        Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
        | None
    ) = Field(
        default="info",
        description="The server's log messages during a call, from this level up, become "
        "mcp.log events of the call (2026-07-28 servers send them only when asked; null: "
        "none are asked for).",
    )
    timeout: float = Field(
        default=60.0, gt=0, le=3600, description="Seconds one tool call may take."
    )
    connect_timeout: float = Field(
        default=30.0, gt=0, le=600, description="Seconds starting and initialising may take."
    )

    @field_validator("pass_env")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    @model_validator(mode="after")
    def _transport_fields(self) -> ServerSettings:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError("a stdio server needs 'command'")
            if self.url is not None:
                raise ValueError("'url' is for transport: http; a stdio server has a command")
            if not isinstance(self.auth, NoAuth):
                raise ValueError("'auth' is for transport: http (a stdio server gets env)")
        else:
            if not self.url:
                raise ValueError("an http server needs 'url'")
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"url {self.url!r} must start with http:// or https://")
            if self.command is not None:
                raise ValueError("'command' is for transport: stdio; an http server has a url")
        return self


class McpSettings(BaseModel):
    """The ``mcp:`` section: the MCP servers whose tools the agent offers."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, ServerSettings] = Field(
        default_factory=dict, description="MCP servers by name (letters, digits, '_', '-')."
    )
    namespace: str = Field(
        default="{server}",
        description="The namespace of every MCP server's tools, offered as "
        "<namespace>__<tool>; {server} is the server's name. 1-32 letters, digits, '_' or "
        "'-', starting with a letter; names are then made safe for every model API "
        "([A-Za-z0-9_-], at most 64 characters).",
    )
    fail_fast: bool = Field(
        default=False,
        description="true: a server that cannot be started when the agent opens stops the "
        "agent from opening. false: one warning line, and it is tried again at its next call.",
    )

    @field_validator("servers")
    @classmethod
    def _server_names(cls, value: dict[str, ServerSettings]) -> dict[str, ServerSettings]:
        for name in value:
            if not _SERVER_NAME.match(name):
                raise ValueError(
                    f"server name {name!r}: use up to 32 letters, digits, '_' or '-', "
                    "starting with a letter"
                )
        return value

    def namespace_of(self, server: str) -> str:
        """The namespace ``server``'s tools are offered in (``<namespace>__<tool>``)."""
        settings = self.servers[server]
        template = settings.namespace if settings.namespace is not None else self.namespace
        return template.replace("{server}", server)

    @model_validator(mode="after")
    def _namespaces(self) -> McpSettings:
        for server in self.servers:
            namespace = self.namespace_of(server)
            if not re.fullmatch(NAMESPACE_PATTERN, namespace):
                raise ValueError(
                    f"server {server!r}: namespace {namespace!r} is not 1-32 letters, digits, "
                    "'_' or '-' starting with a letter (set mcp.namespace or the server's "
                    "namespace)"
                )
        return self
