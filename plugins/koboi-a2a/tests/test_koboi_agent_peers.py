"""koboi-agent's top-level ``peers``: an alias of ``a2a`` (``a2a.peers``).

How a peer's card is checked is never relaxed by the conversion: a koboi-agent peer
entry converts to a peer whose card must be signed, unless the entry itself says
otherwise (``allow_unsigned: true``, or a pinned key).
"""

from __future__ import annotations

from typing import Any

import pytest

from koboi.config import validate_config
from koboi.errors import ConfigError
from koboi_a2a.config import A2ASettings

PEER = {"name": "billing", "url": "https://billing.example/", "token": "tok-1", "timeout": 45}


def _a2a(peers: Any, **more: Any) -> A2ASettings:
    raw = {"llm": {"provider": "scripted"}, "peers": peers, **more}
    section = validate_config(raw).section("a2a")
    assert isinstance(section, A2ASettings)
    return section


def test_token_and_timeout_become_api_key_and_timeout_seconds() -> None:
    (peer,) = _a2a({"enabled": True, "peers": [PEER]}).peers
    assert (peer.name, peer.url, peer.timeout_seconds) == ("billing", "https://billing.example", 45)
    assert peer.api_key is not None and peer.api_key.get_secret_value() == "tok-1"
    assert peer.allow_unsigned is False  # koboi-agent's peers did not sign: not relaxed


def test_unsigned_cards_are_accepted_only_when_the_entry_says_so() -> None:
    (peer,) = _a2a({"enabled": True, "peers": [{**PEER, "allow_unsigned": True}]}).peers
    assert peer.allow_unsigned is True


def test_disabled_peers_offer_nothing_and_serve_nothing() -> None:
    section = _a2a({"enabled": False, "peers": [PEER]})
    assert section.peers == [] and section.serve.enabled is False


@pytest.mark.parametrize(
    ("peers", "message"),
    [
        ({"enabled": True, "inbound_tokens": ["t"]}, "koboi keys create --peer"),
        ({"enabled": True, "peers": [{**PEER, "agent_name": "x"}]}, "peers.peers[0].agent_name"),
        ({"enabled": True, "public_base_url": "https://me"}, "write a2a.serve.url"),
    ],
)
def test_what_has_no_counterpart_is_one_line_saying_what_to_write(
    peers: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _a2a(peers)
    problems = [p for p in info.value.problems if p.path == "peers"]
    assert problems and message in problems[0].message, info.value.problems
    assert "\n" not in problems[0].message


def test_set_both_ways_differently_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"a2a\.serve\.enabled"):
        _a2a({"enabled": False}, a2a={"serve": {"enabled": True}})
