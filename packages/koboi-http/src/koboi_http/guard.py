"""The SSRF guard: which resolved addresses koboi may connect to for a URL it was given.

``web_fetch`` (a URL from the model) and the server's webhooks (a URL from an
API client) both decide here, so the two cannot drift. Decisions are made on
*addresses*, never on how a URL spells its host: a host is resolved first
(every notation — ``127.1``, ``0x7f000001``, ``2130706433``,
``[::ffff:127.0.0.1]``, names that point inside — ends up as the same
address), then every resolved address is checked here. One refused address
refuses the host, so a name with one public and one private record cannot be
used to reach the private one.

Only the standard library and anyio: a caller can check an allow-list at
config time without loading httpx (:mod:`koboi_http.pinning` connects).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

import anyio

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: ``resolver(host, port)`` -> the addresses the host name stands for (strings, in order).
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

#: Instance metadata services hand out cloud credentials: refused even when an
#: allow-list would cover them, since no intranet page needs them.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, Oracle, DigitalOcean...
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
    )
)

# Checked in order; the first match names the refusal. ``is_global`` below
# catches what these miss, so the list is for clear messages, not completeness.
_NAMED_V4: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/8"), "an unspecified ('this network') address"),
    (_V4("127.0.0.0/8"), "a loopback address"),
    (_V4("10.0.0.0/8"), "a private address (RFC 1918)"),
    (_V4("172.16.0.0/12"), "a private address (RFC 1918)"),
    (_V4("192.168.0.0/16"), "a private address (RFC 1918)"),
    (_V4("169.254.0.0/16"), "a link-local address"),
    (_V4("100.64.0.0/10"), "a shared (carrier-grade NAT) address"),
    (_V4("198.18.0.0/15"), "a benchmarking address"),
    (_V4("192.0.0.0/24"), "an IETF protocol address"),
    (_V4("192.0.2.0/24"), "a documentation address"),
    (_V4("198.51.100.0/24"), "a documentation address"),
    (_V4("203.0.113.0/24"), "a documentation address"),
    (_V4("192.88.99.0/24"), "a 6to4 relay address"),
    (_V4("224.0.0.0/4"), "a multicast address"),
    (_V4("240.0.0.0/4"), "a reserved address"),
)
_NAMED_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("::/128"), "an unspecified address"),
    (_V6("::1/128"), "a loopback address"),
    (_V6("::/96"), "an IPv4-compatible address (deprecated)"),
    (_V6("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (_V6("100::/64"), "a discard-only address"),
    (_V6("2001:db8::/32"), "a documentation address"),
    (_V6("fc00::/7"), "a unique local (private) address"),
    (_V6("fe80::/10"), "a link-local address"),
    (_V6("fec0::/10"), "a site-local address"),
    (_V6("ff00::/8"), "a multicast address"),
)
_NAT64 = _V6("64:ff9b::/96")


@dataclass(frozen=True)
class Verdict:
    """The guard's answer for one address: the address to connect to, or why not."""

    address: IPAddress
    refusal: str | None = None
    absolute: bool = False  # no allow-list can lift this refusal

    @property
    def allowed(self) -> bool:
        return self.refusal is None


def connect_form(address: IPAddress) -> IPAddress:
    """The address a connection really goes to: IPv4-mapped IPv6 (``::ffff:a.b.c.d``) is IPv4."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.scope_id:
            # fe80::1%eth0 compares unequal to fe80::1; the scope does not change the class.
            return ipaddress.IPv6Address(address.compressed.split("%", 1)[0])
    return address


def classify(address: IPAddress) -> tuple[str | None, bool]:
    """Why ``address`` is not public (``None`` when it is), and whether that is absolute.

    Absolute refusals (cloud metadata, also embedded in IPv6) hold even for
    allow-listed hosts and networks.
    """
    address = connect_form(address)
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address", True
    if isinstance(address, ipaddress.IPv4Address):
        for network, reason in _NAMED_V4:
            if address in network:
                return reason, False
        if address == ipaddress.IPv4Address("255.255.255.255"):
            return "the broadcast address", False
        return (None, False) if address.is_global else ("not a public address", False)
    for network6, reason6 in _NAMED_V6:
        if address in network6:
            return reason6, False
    # Transition forms carry an IPv4 address that a relay or gateway would reach.
    for embedded, kind in _embedded_ipv4(address):
        inner, absolute = classify(embedded)
        if inner is not None:
            return f"{kind} embedding {embedded}, {inner}", absolute
    if address.is_multicast or address.is_reserved or address.is_link_local:
        return "a reserved address", False
    return (None, False) if address.is_global else ("not a public address", False)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> Iterable[tuple[ipaddress.IPv4Address, str]]:
    if address.sixtofour is not None:
        yield address.sixtofour, "a 6to4 address"
    if address.teredo is not None:
        server, client = address.teredo
        yield server, "a Teredo address"
        yield client, "a Teredo address"
    if address in _NAT64:
        yield ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "a NAT64 address"


class AddressPolicy:
    """Public addresses pass; others only through the operator's allow-list."""

    def __init__(self, allow_hosts: Iterable[str] = (), allow_networks: Iterable[str] = ()) -> None:
        self.allow_networks: tuple[IPNetwork, ...] = tuple(
            ipaddress.ip_network(n, strict=False) for n in allow_networks
        )
        names: set[str] = set()
        suffixes: list[str] = []
        addresses: set[IPAddress] = set()
        for entry in allow_hosts:
            try:
                addresses.add(connect_form(ipaddress.ip_address(entry.strip("[]"))))
                continue
            except ValueError:
                pass
            if entry.startswith("*."):
                suffixes.append(entry[1:])  # ".corp": any name under corp
            else:
                names.add(entry)
        self._names = frozenset(names)
        self._suffixes = tuple(suffixes)
        self._addresses = frozenset(addresses)

    def host_allowed(self, host: str) -> bool:
        """Is this (normalized) host name on the allow-list?"""
        return host in self._names or any(host.endswith(s) for s in self._suffixes)

    def check(self, address: IPAddress, *, host_allowed: bool = False) -> Verdict:
        """The verdict for one resolved address of a host (allow-listed by name or not)."""
        target = connect_form(address)
        reason, absolute = classify(target)
        if reason is None:
            return Verdict(target)
        if not absolute and (
            host_allowed
            or target in self._addresses
            or any(target.version == n.version and target in n for n in self.allow_networks)
        ):
            return Verdict(target)
        return Verdict(target, reason, absolute)


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """Resolve with the system's resolver (getaddrinfo in a worker thread), keeping its order."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        text = str(sockaddr[0])
        if text not in found:
            found.append(text)
    return found


def literal_address(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is written as one (``[::1]`` too), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


# -- allow-list entries ---------------------------------------------------------


def normalize_host_name(name: str) -> str:
    """Lower case, IDNA (punycode) and without the one trailing dot of an absolute name."""
    name = name.strip().lower()
    if name.endswith("."):
        name = name[:-1]
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise ValueError(f"{name!r} is not a valid host name ({exc})") from None
    return name


def normalize_allowed_host(value: str) -> str:
    """An allow-list host entry in the form it is compared in; ValueError when malformed.

    An address (``[::1]`` too) becomes its canonical text; ``*.corp`` stays a
    suffix entry; a name is normalized by :func:`normalize_host_name`.
    """
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    wildcard = text.startswith("*.")
    name = normalize_host_name(text[2:] if wildcard else text)
    labels = name.split(".")
    if not name or any(not label or len(label) > 63 for label in labels) or "*" in name:
        raise ValueError(
            f"{value!r} is not a host name; write 'intranet.corp', '*.corp' or an IP address"
        )
    return f"*.{name}" if wildcard else name


def normalize_allowed_network(value: str) -> str:
    """An allow-list CIDR entry in canonical form; ValueError when it is not one.

    Host bits must be zero (``10.0.0.1/8`` is refused): such an entry is more
    likely a typo than a wish to open all of ``10.0.0.0/8``.
    """
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        raise ValueError(
            f"{value!r} is not a CIDR network ({exc}); write e.g. '10.0.0.0/8'"
        ) from None
