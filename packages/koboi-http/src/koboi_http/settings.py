"""The ``http:`` config section: where the run's W3C trace context is sent.

Only pydantic, the stdlib and the guard's host-name normalization here (no
httpx): the section is registered while plugins load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, field_validator

from koboi_http.guard import normalize_allowed_host, normalize_host_name
from koboi_http.hooks import PROVIDER

SECTION = "http"

_PEER = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


class HTTPSettings(BaseModel):
    """Settings of koboi's outbound HTTP: trace propagation."""

    model_config = ConfigDict(extra="forbid")

    propagate_trace: bool = Field(
        default=True,
        description=(
            "Send the run's W3C trace context (traceparent, with a new span id per request, "
            "and tracestate when the run has one) with the outbound requests of a run that "
            "go to trace_peers or trace_hosts. A request that already has a traceparent keeps "
            "it. false: never send it."
        ),
    )
    trace_peers: list[str] = Field(
        default_factory=lambda: [PROVIDER],
        description=(
            "Kinds of server that receive the trace context: 'provider' (model providers, the "
            "default), 'search' (web_search backends), 'fetch' (every site web_fetch reaches: "
            "the trace id would go to any site a model chooses), 'webhook' (webhook receivers), "
            "'other', or a name a third-party client gives."
        ),
    )
    trace_hosts: list[str] = Field(
        default_factory=list,
        description=(
            "Hosts that receive the trace context whatever the kind of request (trusted peers "
            "reached by web_fetch or webhooks): 'collector.corp' matches that name only, "
            "'*.corp' any name under corp, an IP address that address."
        ),
    )

    @field_validator("trace_peers")
    @classmethod
    def _peer_names(cls, value: list[str]) -> list[str]:
        for peer in value:
            if not _PEER.match(peer):
                raise ValueError(
                    f"{peer!r} is not a peer name; use provider, search, fetch, webhook or other"
                )
        return value

    @field_validator("trace_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        return [normalize_allowed_host(entry) for entry in value]

    @cached_property
    def trusted(self) -> TrustedPeers:
        """``trace_peers`` and ``trace_hosts`` in the form requests are matched against."""
        return TrustedPeers(
            frozenset(self.trace_peers),
            frozenset(h for h in self.trace_hosts if not h.startswith("*.")),
            tuple(h[1:] for h in self.trace_hosts if h.startswith("*.")),
        )

    def sends_trace_to(self, peer: str, host: str | None = None) -> bool:
        """Whether a request of kind ``peer`` to ``host`` (a name or an address) gets it."""
        if not self.propagate_trace:
            return False
        trusted = self.trusted
        return peer in trusted.peers or (host is not None and trusted.host(host))


@dataclass(frozen=True, slots=True)
class TrustedPeers:
    """Who receives the trace context: kinds of peer, host names, ``.suffix`` endings."""

    peers: frozenset[str]
    names: frozenset[str]
    suffixes: tuple[str, ...]

    def host(self, host: str) -> bool:
        """Whether ``host`` (a name or an address) is one of ``trace_hosts``."""
        if not self.names and not self.suffixes:
            return False
        try:
            name = normalize_allowed_host(host)
        except ValueError:
            try:
                name = normalize_host_name(host)
            except ValueError:
                return False
        return name in self.names or any(name.endswith(s) for s in self.suffixes)


#: The settings of a run whose config has no ``http:`` section.
DEFAULT_SETTINGS = HTTPSettings()
