"""Connecting only to the address the SSRF guard checked.

Checking a URL's host and then handing the URL to an HTTP client is not
enough: the client resolves the name again, and a DNS answer that changed in
between (rebinding) sends the request to an address nobody checked. So:

- :func:`pin` resolves the host once (with an injectable resolver) and checks
  *every* address with an :class:`~koboi_http.guard.AddressPolicy`; the
  result, a :class:`PinnedTarget`, is the URL and the addresses it may reach;
- :func:`send_pinned` sends the request to one of those addresses: the
  request URL holds the IP, the ``Host`` header keeps the name, and for https
  TLS SNI and certificate verification use the name (httpx's ``sni_hostname``
  extension). Nothing resolves the name a second time;
- :func:`pinned_client` makes the client to send with: ``trust_env=False``
  (a proxy from the environment would resolve the name itself), redirects
  not followed (a redirect's target must be pinned like the first URL), no
  retries; its requests run the plugins' request hooks
  (:func:`koboi_http.outbound.instrument`) as the ``peer`` it is given. Make
  one per target: a pooled TLS connection verified for one name must never
  carry another name's request to the same address.

Used by ``web_fetch`` and by the server's webhook deliveries. httpx is
imported only by the functions that send, so a caller can import this module
(the server does at startup) without loading it.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from koboi.errors import KoboiError
from koboi_http.guard import (
    AddressPolicy,
    IPAddress,
    Resolver,
    literal_address,
    normalize_host_name,
    system_resolver,
)
from koboi_http.hooks import OTHER

if TYPE_CHECKING:
    import httpx

    from koboi.plugins import PluginHost

__all__ = [
    "AddressRefused",
    "HostUnresolved",
    "PinnedTarget",
    "pin",
    "pinned_client",
    "send_pinned",
]


class HostUnresolved(KoboiError):
    """The host gave no address to check; nothing was sent. ``reason`` says why."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(reason)
        self.host = host
        self.reason = reason


class AddressRefused(KoboiError):
    """The host resolved to an address the guard refuses, or to something that is not one.

    ``reason`` names the host and what it resolved to (``'db.corp' resolves to
    10.1.2.3, which is a private address (RFC 1918)``); ``liftable`` is True
    when an allow-list entry could let it through (never for cloud metadata).
    Nothing was sent.
    """

    def __init__(self, host: str, reason: str, *, liftable: bool) -> None:
        super().__init__(reason)
        self.host = host
        self.reason = reason
        self.liftable = liftable


@dataclass(frozen=True)
class PinnedTarget:
    """A checked URL and the addresses a request to it may connect to, in order."""

    url: httpx.URL
    #: The normalized name (or address literal) for the Host header, SNI and verification.
    host: str
    addresses: tuple[IPAddress, ...]

    def host_header(self) -> str:
        """The ``Host`` header: the URL's host (normalized) and its port if it gave one."""
        netloc = self.url.netloc.decode("ascii")
        if literal_address(self.host) is not None:
            return netloc
        return netloc.replace(self.url.raw_host.decode("ascii"), self.host, 1)

    def url_for(self, address: IPAddress) -> httpx.URL:
        """The request URL that connects to ``address``, keeping path and query."""
        return self.url.copy_with(host=str(address), fragment=None)

    def extensions(self) -> dict[str, Any]:
        """httpx request extensions: for https to a name, TLS SNI and verification on it."""
        if self.url.scheme == "https" and literal_address(self.host) is None:
            return {"sni_hostname": self.host}
        return {}


async def pin(
    url: httpx.URL, policy: AddressPolicy, resolver: Resolver | None = None
) -> PinnedTarget:
    """Resolve ``url``'s host and check every address: the pinned target, or why not.

    Raises :class:`HostUnresolved` when the resolver fails or answers nothing,
    :class:`AddressRefused` when one answer is refused (one is enough: a name
    with a public and a private record must not reach the private one).
    """
    raw = url.raw_host.decode("ascii")
    literal = literal_address(raw)
    host = raw if literal is not None else normalize_host_name(raw)
    port = url.port or (443 if url.scheme == "https" else 80)
    if literal is not None:
        found: Sequence[str] = [str(literal)]
    else:
        try:
            found = await (resolver or system_resolver)(host, port)
        except OSError as exc:
            raise HostUnresolved(host, str(exc.strerror or exc)) from None
        except UnicodeError as exc:  # e.g. a label longer than 63 characters
            raise HostUnresolved(host, str(exc)) from None
    addresses: list[IPAddress] = []
    for text in found:
        try:
            addresses.append(ipaddress.ip_address(text))
        except ValueError:
            raise AddressRefused(
                host, f"{host!r} resolved to {text!r}, which is not an address", liftable=False
            ) from None
    if not addresses:
        raise HostUnresolved(host, "no addresses")
    host_allowed = literal is None and policy.host_allowed(host)
    pinned: list[IPAddress] = []
    for address in addresses:
        verdict = policy.check(address, host_allowed=host_allowed)
        if not verdict.allowed:
            what = (
                f"{host!r} is"
                if str(address) == raw
                else f"{host!r} resolves to {address}, which is"
            )
            raise AddressRefused(host, f"{what} {verdict.refusal}", liftable=not verdict.absolute)
        if verdict.address not in pinned:
            pinned.append(verdict.address)
    return PinnedTarget(url=url, host=host, addresses=tuple(pinned))


def pinned_client(
    *,
    timeout: float,
    connect_timeout: float,
    verify: ssl.SSLContext | bool = True,
    transport: httpx.AsyncBaseTransport | None = None,
    peer: str = OTHER,
    host: PluginHost | None = None,
) -> httpx.AsyncClient:
    """A client for one pinned target (``transport`` replaces the network, for tests).

    ``peer`` names whom it talks to for the request hooks (``"fetch"`` for
    web_fetch, ``"webhook"`` for webhook deliveries; see :mod:`koboi_http.hooks`):
    the run's trace context goes to none of them unless ``http.trace_peers`` or
    ``http.trace_hosts`` say so. ``host`` is the plugin host whose request hooks
    run for requests made outside a run (default: the kernel's default host).
    """
    import httpx

    from koboi_http.outbound import client

    return client(
        peer=peer,
        host=host,
        transport=transport or httpx.AsyncHTTPTransport(verify=verify, retries=0),
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(timeout, connect=connect_timeout),
    )


async def send_pinned(
    client: httpx.AsyncClient,
    method: str,
    target: PinnedTarget,
    *,
    headers: Mapping[str, str] | None = None,
    content: bytes | None = None,
) -> tuple[httpx.Response, IPAddress]:
    """Send to the first of ``target``'s addresses that accepts a connection.

    Returns the response, streamed (the caller reads and closes it), and the
    address it came from. ``Host`` is set here; a ``Host`` in ``headers`` is
    ignored. When no address accepts, the last ``httpx.ConnectError`` or
    ``httpx.ConnectTimeout`` is raised.
    """
    import httpx

    merged = {"Host": target.host_header()}
    merged.update({k: v for k, v in (headers or {}).items() if k.lower() != "host"})
    extensions = target.extensions()
    failure: httpx.TransportError = httpx.ConnectError("no address to connect to")
    for address in target.addresses:
        request = client.build_request(
            method, target.url_for(address), headers=merged, content=content, extensions=extensions
        )
        try:
            return await client.send(request, stream=True), address
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            failure = exc
    raise failure
