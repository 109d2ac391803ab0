"""The agent card: built from the agent, signed, and checked when fetched from a peer.

Signing and verification are a2a-sdk's (``a2a.utils.signing``): a JWS whose payload
is the card's RFC 8785 canonical JSON without its ``signatures``, carried in the card
as a detached signature. The public half of the signing key is served as a JWK set
(``/.well-known/jwks.json``, named by the signature's ``jku`` header) so a peer may
pin it or fetch it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH

from koboi.errors import KoboiError
from koboi_a2a.config import PeerSettings, ServeSettings, SigningSettings

#: Where the JSON-RPC endpoint is served (under /v1/, where API keys are checked).
RPC_PATH = "/v1/a2a"
#: Where the public key of the card's signature is served.
JWKS_PATH = "/.well-known/jwks.json"
CARD_PATH = AGENT_CARD_WELL_KNOWN_PATH
PROTOCOL_VERSION = "1.0"
#: The algorithms a peer's card may be signed with (never "none", never HMAC).
ALGORITHMS = ["ES256", "ES384", "RS256", "PS256", "EdDSA"]
_SCHEME = "bearer"


def _summary(text: str) -> str:
    first = text.strip().split("\n\n", 1)[0].strip()
    return first[:500]


def build_card(
    *,
    name: str,
    system_prompt: str,
    tools: Sequence[str],
    settings: ServeSettings,
    base_url: str,
) -> pb.AgentCard:
    """The card of an agent: one skill per configured skill, else the agent itself."""
    description = settings.description or _summary(system_prompt) or f"The koboi agent {name}."
    if settings.skills:
        skills = [
            pb.AgentSkill(
                id=s.id,
                name=s.name or s.id,
                description=s.description or description,
                tags=s.tags or ["koboi"],
                examples=s.examples,
            )
            for s in settings.skills
        ]
    else:
        skills = [
            pb.AgentSkill(
                id=name, name=name, description=description, tags=sorted(tools) or ["koboi"]
            )
        ]
    card = pb.AgentCard(
        name=name,
        description=description,
        version=settings.version,
        supported_interfaces=[
            pb.AgentInterface(
                url=base_url.rstrip("/") + RPC_PATH,
                protocol_binding="JSONRPC",
                protocol_version=PROTOCOL_VERSION,
            )
        ],
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=skills,
    )
    card.security_schemes[_SCHEME].CopyFrom(
        pb.SecurityScheme(
            http_auth_security_scheme=pb.HTTPAuthSecurityScheme(
                scheme="Bearer",
                bearer_format="koboi API key",
                description="A key from 'koboi keys create --peer NAME' on this server.",
            )
        )
    )
    requirement = pb.SecurityRequirement()
    requirement.schemes[_SCHEME].SetInParent()
    card.security_requirements.append(requirement)
    if settings.organization or settings.provider_url:
        card.provider.CopyFrom(
            pb.AgentProvider(organization=settings.organization, url=settings.provider_url)
        )
    return card


def _pem(
    text: str | None, file: str | None, where: str, base_dir: Path
) -> tuple[bytes, str] | None:
    """The PEM given inline (``<where>``) or in a file (``<where>_file``), and where it was."""
    if text is not None:
        return text.encode(), where
    if file is None:
        return None
    path = (base_dir / file).expanduser()
    named = f"{where}_file ({path})"
    try:
        return path.read_bytes(), named
    except OSError as exc:
        raise KoboiError(f"{named}: cannot read the key: {exc.strerror or exc}") from None


def _private_key(signing: SigningSettings, base_dir: Path) -> Any:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    secret = signing.key.get_secret_value() if signing.key is not None else None
    found = _pem(secret, signing.key_file, "a2a.serve.signing.key", base_dir)
    if found is None:
        raise KoboiError("a2a.serve.signing: give key_file or key (make one: koboi a2a keygen)")
    pem, where = found
    try:
        return load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise KoboiError(f"{where}: not an unencrypted PEM private key: {exc}") from None


def _algorithm(name: str) -> Any:
    from jwt.algorithms import get_default_algorithms

    algorithms = get_default_algorithms()
    if name not in algorithms:
        raise KoboiError(f"JWS algorithm {name!r} is not available (install cryptography)")
    return algorithms[name]


class CardSigner:
    """Signs the card with the configured key; its public half as a JWK set."""

    def __init__(self, signing: SigningSettings, base_dir: Path, base_url: str) -> None:
        from a2a.utils.signing import create_agent_card_signer

        key = _private_key(signing, base_dir)
        algorithm = _algorithm(signing.algorithm)
        try:
            jwk = algorithm.to_jwk(key.public_key(), as_dict=True)
        except Exception as exc:  # a key of another family than the algorithm
            raise KoboiError(
                f"a2a.serve.signing: the key does not fit algorithm {signing.algorithm}: {exc}"
            ) from None
        jwk.update({"kid": signing.kid, "alg": signing.algorithm, "use": "sig"})
        self.jwks: dict[str, Any] = {"keys": [jwk]}
        self._sign = create_agent_card_signer(
            signing_key=key,
            protected_header={
                "kid": signing.kid,
                "alg": signing.algorithm,
                "jku": base_url.rstrip("/") + JWKS_PATH,
                "typ": "JOSE",
            },
        )

    def sign(self, card: pb.AgentCard) -> pb.AgentCard:
        signed = pb.AgentCard()
        signed.CopyFrom(card)
        del signed.signatures[:]
        return self._sign(signed)


def card_json(card: pb.AgentCard) -> dict[str, Any]:
    """The card as served (camelCase JSON, as the spec writes it)."""
    return agent_card_to_dict(card)


# -- a peer's card -------------------------------------------------------------------


class CardRefused(KoboiError):
    """A peer's card failed its signature check (and unsigned cards are not allowed)."""


def _public_key(peer: PeerSettings, base_dir: Path) -> Any | None:
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    where = f"a2a.peers.{peer.name}.public_key"
    found = _pem(peer.public_key, peer.public_key_file, where, base_dir)
    if found is None:
        return None
    pem, where = found
    try:
        return load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise KoboiError(f"{where}: not a PEM public key: {exc}") from None


def _same_origin(a: str, b: str) -> bool:
    x, y = urlsplit(a), urlsplit(b)
    return (x.scheme, x.netloc) == (y.scheme, y.netloc)


def verifier_for(
    peer: PeerSettings, base_dir: Path, jwks: Callable[[str], Mapping[str, Any]]
) -> Callable[[pb.AgentCard], None] | None:
    """A check of the peer's card signature (a2a-sdk's verifier), or None when the config
    gives no way to trust a key. ``jwks(url)`` fetches a JWK set (only on the peer's
    own origin, with ``trust_card_jwks``)."""
    from a2a.utils.signing import create_signature_verifier
    from jwt import PyJWK

    pinned = _public_key(peer, base_dir)
    if pinned is None and not peer.trust_card_jwks:
        return None

    def key_provider(kid: str | None, jku: str | None) -> Any:
        if pinned is not None:
            return pinned
        if not jku or not _same_origin(jku, peer.url):
            raise CardRefused(f"the card's key set {jku!r} is not on the peer's origin")
        for key in jwks(jku).get("keys") or ():
            if isinstance(key, dict) and key.get("kid") == kid:
                return PyJWK(key)
        raise CardRefused(f"no key {kid!r} in the peer's key set")

    verify = create_signature_verifier(key_provider, ALGORITHMS)

    def check(card: pb.AgentCard) -> None:
        try:
            verify(card)
        except CardRefused:
            raise
        except Exception as exc:  # a2a-sdk's SignatureVerificationError and friends
            raise CardRefused(str(exc) or type(exc).__name__) from None

    return check


def parse_card(data: Mapping[str, Any]) -> pb.AgentCard:
    """A card from its JSON (a2a-sdk's parser, which also reads 0.3 cards)."""
    from a2a.client.card_resolver import parse_agent_card

    try:
        return parse_agent_card(json.loads(json.dumps(data)))
    except Exception as exc:  # the SDK's parser raises many kinds: one line for all
        raise KoboiError(f"not an A2A agent card: {exc}") from None
