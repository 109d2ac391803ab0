"""koboi-agent's top-level ``peers`` section, as a fragment of ``a2a`` (registered
as its alias).

koboi-agent called its peers with its own ``/v1/peer/invoke`` request, and its card
was no A2A card (at most an HMAC keyed with a shared ``org_secret``); koboi calls
them over A2A and, by default, refuses a card whose signature it cannot verify. So nothing is relaxed silently here: a peer entry
may say how its card is checked (``public_key``, ``public_key_file``,
``trust_card_jwks``, or ``allow_unsigned: true`` written out), as in ``a2a.peers``.
Keys with no counterpart are a ``ValueError`` naming the key and what to write
instead. Pydantic-free: a config is converted before anything is validated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: A peer's keys koboi-agent spelled differently.
_RENAMED = {"token": "api_key", "timeout": "timeout_seconds"}
#: A peer's keys spelled as in ``a2a.peers`` (how its card is checked must be explicit).
_SAME = ("name", "url", "public_key", "public_key_file", "trust_card_jwks", "allow_unsigned")
#: Section keys with no counterpart, and what to write instead.
_REFUSED = {
    "inbound_tokens": "callers use API keys: koboi keys create --peer",
    "org": "koboi's card names it as a2a.serve.organization",
    "org_secret": "sign koboi's card with a2a.serve.signing",
    "public_base_url": "write a2a.serve.url",
    "allow_private_network": "koboi calls the configured peer URLs only",
    "rate_limit_per_minute": "limit a2a__* calls with governance.rate_limits",
    "max_concurrent_inbound": "write server.max_concurrent_runs",
    "card_freshness_seconds": "write a2a.peers[].card_ttl_seconds",
}


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be a mapping")
    return value


def _peer(index: int, value: Any) -> dict[str, Any]:
    where = f"peers.peers[{index}]"
    peer: dict[str, Any] = {}
    for key, item in _mapping(value, where).items():
        if key in _RENAMED:
            peer[_RENAMED[key]] = item
        elif key in _SAME:
            peer[key] = item
        elif key in ("agent_name", "org"):
            raise ValueError(
                f"{where}.{key}: has no counterpart in koboi; an A2A peer serves one agent "
                "at its URL"
            )
        else:
            raise ValueError(
                f"{where}.{key}: has no counterpart in koboi; see a2a.peers in koboi config schema"
            )
    return peer


def peers(value: Any) -> dict[str, Any]:
    """koboi-agent's ``peers`` (``enabled``, ``peers: [{name, url, token, timeout}]``)
    as a fragment of ``a2a``. ``enabled: false`` (koboi-agent's default) offers no
    peer and serves nothing."""
    section = _mapping(value, "peers")
    for key in section:
        if key in _REFUSED:
            raise ValueError(f"peers.{key}: has no counterpart in koboi; {_REFUSED[key]}")
        if key not in ("enabled", "peers"):
            raise ValueError(f"peers.{key}: has no counterpart in koboi; see a2a in koboi schema")
    if not section.get("enabled", False):
        return {"serve": {"enabled": False}}
    entries = section.get("peers") or []
    if not isinstance(entries, list):
        raise ValueError("peers.peers: must be a list of peers")
    return {"peers": [_peer(index, entry) for index, entry in enumerate(entries)]}
