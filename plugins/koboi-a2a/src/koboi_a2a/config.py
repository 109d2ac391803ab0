"""The ``a2a:`` config section: what ``koboi serve`` offers to A2A peers, and the peers
this agent calls. Only pydantic here: the section is registered while plugins load.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_SKILL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class SkillSettings(BaseModel):
    """One skill the agent card announces."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="The skill's id (letters, digits, _ . -).")
    name: str = Field(default="", description="Its name for people (default: the id).")
    description: str = Field(default="", description="What the skill does.")
    tags: list[str] = Field(default_factory=list, description="Keywords.")
    examples: list[str] = Field(default_factory=list, description="Example requests.")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _SKILL_ID.match(value):
            raise ValueError(f"{value!r} is not a skill id: use letters, digits, _ . - (max 64)")
        return value


class SigningSettings(BaseModel):
    """The key the agent card is signed with (JWS over the card's RFC 8785 canonical JSON)."""

    model_config = ConfigDict(extra="forbid")

    key_file: str | None = Field(
        default=None,
        description="PEM file of the private key (EC P-256 for ES256, RSA for RS256, Ed25519 "
        "for EdDSA); relative to the config file. Make one with 'koboi a2a keygen'.",
    )
    key: SecretStr | None = Field(
        default=None, description="The PEM private key itself (e.g. '${A2A_SIGNING_KEY}')."
    )
    algorithm: Literal["ES256", "ES384", "RS256", "PS256", "EdDSA"] = Field(
        default="ES256", description="The JWS algorithm (must fit the key)."
    )
    kid: str = Field(default="koboi-card", description="The key id written in the JWS header.")

    @model_validator(mode="after")
    def _one(self) -> SigningSettings:
        if self.key_file is not None and self.key is not None:
            raise ValueError("give either key_file or key, not both")
        return self


class ServeSettings(BaseModel):
    """What ``koboi serve`` offers to peers."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Serve the agent card and the A2A endpoint on koboi serve.",
    )
    url: str | None = Field(
        default=None,
        description="The base URL peers reach this server at (written in the card); default: "
        "http://<server.host>:<server.port>.",
    )
    description: str = Field(
        default="", description="The card's description (default: the agent's system prompt)."
    )
    version: str = Field(default="1.0.0", description="The card's version of this agent.")
    organization: str = Field(default="", description="The card's provider organization.")
    provider_url: str = Field(default="", description="The card's provider URL.")
    skills: list[SkillSettings] = Field(
        default_factory=list,
        description="The card's skills; default: one skill, the agent itself, tagged with its "
        "tools.",
    )
    signing: SigningSettings | None = Field(
        default=None, description="Sign the card (unsigned without it)."
    )
    wait_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How long a blocking message/send waits for its task to settle before "
        "it answers with the task as it is (still working).",
    )


class PeerSettings(BaseModel):
    """One A2A agent this agent may call: its skills become tools ``<name>__<skill>``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        description="The peer's name: the namespace of its tools (letters, digits, _ -)."
    )
    url: str = Field(description="The peer's base URL (its card is at the well-known path).")
    api_key: SecretStr | None = Field(
        default=None,
        description="Sent as 'Authorization: Bearer <key>' (a peer key: koboi keys create "
        "--peer on the other side); e.g. '${PEER_KEY}'.",
    )
    public_key_file: str | None = Field(
        default=None,
        description="PEM public key the peer's card must be signed with (relative to the "
        "config file).",
    )
    public_key: str | None = Field(
        default=None, description="The PEM public key itself (instead of public_key_file)."
    )
    trust_card_jwks: bool = Field(
        default=False,
        description="Without a pinned public key: accept a signature made with a key of the "
        "JWK set the card's header names (jku), if it is on the peer's own origin.",
    )
    allow_unsigned: bool = Field(
        default=False,
        description="Accept a card without a valid signature (refused by default).",
    )
    risk: Literal["safe", "moderate", "destructive"] = Field(
        default="moderate",
        description="The risk of a call to this peer (decides approval as for any tool).",
    )
    idempotent: bool = Field(
        default=False,
        description="A call that started and never finished (a crash) may be sent again: true "
        "for peers that recognise a repeated message id (koboi does); else the in-doubt rule "
        "applies.",
    )
    skills: list[str] = Field(
        default_factory=list,
        description="Offer only these skills (by id); default: every skill of the card.",
    )
    card_ttl_seconds: float = Field(
        default=300.0,
        ge=0,
        description="How long a fetched card is used before it is fetched again.",
    )
    timeout_seconds: float = Field(
        default=600.0, gt=0, description="Longest a call may take, reconnections included."
    )
    streaming: bool = Field(
        default=True,
        description="Stream the peer's events into this run's stream (when its card says it "
        "streams).",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"{value!r} is not a peer name: 1 to 32 letters, digits, _ -, starting with a "
                "letter"
            )
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _one_key(self) -> PeerSettings:
        if self.public_key_file is not None and self.public_key is not None:
            raise ValueError("give either public_key_file or public_key, not both")
        return self


class A2ASettings(BaseModel):
    """The ``a2a`` section."""

    model_config = ConfigDict(extra="forbid")

    serve: ServeSettings = Field(
        default_factory=ServeSettings, description="What koboi serve offers to A2A peers."
    )
    peers: list[PeerSettings] = Field(
        default_factory=list, description="A2A agents this agent may call, as tools."
    )

    @model_validator(mode="after")
    def _unique(self) -> A2ASettings:
        seen: set[str] = set()
        for peer in self.peers:
            if peer.name in seen:
                raise ValueError(f"two peers are named {peer.name!r}")
            seen.add(peer.name)
        return self
