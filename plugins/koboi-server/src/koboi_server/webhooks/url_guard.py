"""Which webhook URLs koboi may POST to, and the address each delivery is pinned to.

A webhook URL comes from an API client, so without a check it would be a way to
make the server send requests into its own network (SSRF): to loopback
services, the cloud metadata endpoint, the database. The check is made on
*addresses*, never on how the URL spells its host:

1. the URL is parsed by httpx (what is checked is what would be requested):
   ``http``/``https`` only, a host, no ``user:password@``;
2. the host is resolved here (every notation, ``127.1``, ``0x7f000001``,
   ``2130706433``, ``[::ffff:127.0.0.1]``, or a name pointing inside, ends up as
   an address) and *every* address is classified by koboi-tools-web's guard
   (:mod:`koboi_tools_web.guard`, shared with ``web_fetch`` so the two cannot
   drift): loopback, private, link-local, unique-local, CGNAT, multicast,
   reserved and cloud-metadata addresses are refused; one refused address
   refuses the host;
3. the delivery connects to a checked address and nothing else: the request
   goes to the IP, with the ``Host`` header and, for https, SNI and certificate
   verification kept on the name. There is no second lookup, so a DNS answer
   that changes between check and connect (rebinding) changes nothing.

The check runs at registration and again before every attempt. An explicit
allow-list lets intranet receivers through: CIDR networks (``10.20.0.0/16``),
addresses, host names (``hooks.corp``) and suffixes (``*.corp``). Cloud
metadata addresses stay refused whatever the allow-list says.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from koboi_server.webhooks.errors import WebhookError, WebhookURLRefused
from koboi_tools_web.config import normalize_allowed_host, normalize_host_name
from koboi_tools_web.guard import AddressPolicy, IPAddress, Resolver, system_resolver

if TYPE_CHECKING:
    import httpx

__all__ = ["PinnedURL", "WebhookURLPolicy", "parse_allow_list", "parse_webhook_url"]

_PREVIEW = 120
# Host names as compared (lower case, IDNA); '*.' marks a suffix entry.
_HOST_NAME = re.compile(
    r"(\*\.)?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*"
)
MAX_URL_LENGTH = 2048


def shown_url(url: str) -> str:
    """The URL for a message, shortened."""
    return repr(url if len(url) <= _PREVIEW else url[: _PREVIEW - 3] + "...")


def redacted_url(url: str) -> str:
    """Scheme, host and port only: for logs, since paths and queries often hold tokens."""
    import httpx  # here, not at the top: a server without webhooks never loads httpx (~4 MB)

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        return "<invalid url>"
    port = f":{parsed.port}" if parsed.port else ""
    tail = "/..." if parsed.raw_path not in (b"", b"/") else "/"
    return f"{parsed.scheme}://{parsed.host}{port}{tail}"


def parse_allow_list(entries: Iterable[str]) -> tuple[list[str], list[str]]:
    """Split allow-list entries into (hosts, networks) for the guard; WebhookError if malformed.

    ``10.0.0.0/8`` and ``fd12::/48`` are networks; ``127.0.0.1`` or ``[::1]`` one
    address; ``hooks.corp`` one name; ``*.corp`` every name under ``corp``.
    """
    hosts: list[str] = []
    networks: list[str] = []
    for entry in entries:
        if not isinstance(entry, str) or not entry.strip():
            raise WebhookError(
                f"webhook allow-list entry {entry!r} is empty or not text; write a CIDR "
                "('10.0.0.0/8'), an address or a host name ('hooks.corp', '*.corp')"
            )
        text = entry.strip()
        if "/" in text:
            try:
                networks.append(str(ipaddress.ip_network(text, strict=True)))
            except ValueError as exc:
                raise WebhookError(
                    f"webhook allow-list entry {text!r} is not a CIDR network ({exc}); "
                    "write e.g. '10.20.0.0/16'"
                ) from None
            continue
        try:
            host = normalize_allowed_host(text)
        except ValueError as exc:
            raise WebhookError(f"webhook allow-list entry {exc}") from None
        if _literal_address(host) is None and not _HOST_NAME.fullmatch(host):
            raise WebhookError(
                f"webhook allow-list entry {text!r} is not a host name; write 'hooks.corp', "
                "'*.corp', an address or a CIDR network"
            )
        hosts.append(host)
    return hosts, networks


def parse_webhook_url(url: str) -> httpx.URL:
    """The URL as httpx reads it, if it has a form koboi may POST to (not resolved yet)."""
    import httpx

    if not isinstance(url, str):
        raise WebhookURLRefused(f"a webhook URL must be text, not {type(url).__name__}")
    text = url.strip()
    if len(text) > MAX_URL_LENGTH:
        raise WebhookURLRefused(f"the webhook URL is longer than {MAX_URL_LENGTH} characters")
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise WebhookURLRefused(f"not a valid webhook URL {shown_url(text)}: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise WebhookURLRefused(
            f"refused webhook URL {shown_url(text)}: only http and https URLs are called"
            + (f", not {parsed.scheme}:" if parsed.scheme else " (the URL has no scheme)")
        )
    if not parsed.raw_host:
        raise WebhookURLRefused(f"refused webhook URL {shown_url(text)}: it has no host")
    if parsed.userinfo:
        raise WebhookURLRefused(
            f"refused webhook URL {shown_url(text)}: user:password@ is not sent; "
            "authenticate the receiver with the webhook signature instead"
        )
    return parsed.copy_with(fragment=None)


@dataclass(frozen=True)
class PinnedURL:
    """A checked webhook URL and the addresses a delivery may connect to (in order)."""

    url: httpx.URL
    #: The name (or address literal) for the Host header, SNI and certificate checks.
    host: str
    addresses: tuple[IPAddress, ...]

    def host_header(self) -> str:
        netloc = self.url.netloc.decode("ascii")
        if _literal_address(self.host) is not None:
            return netloc
        return netloc.replace(self.url.raw_host.decode("ascii"), self.host, 1)

    def url_for(self, address: IPAddress) -> httpx.URL:
        """The request URL that connects to ``address`` (and keeps path and query)."""
        return self.url.copy_with(host=str(address))


class WebhookURLPolicy:
    """Checks webhook URLs: public addresses pass; others only through the allow-list.

    ``resolver(host, port)`` returns the addresses of a name (by default the
    system's ``getaddrinfo`` in a worker thread); tests inject one that lies, to
    prove that what is checked is what is connected to.
    """

    def __init__(self, allow: Iterable[str] = (), *, resolver: Resolver | None = None) -> None:
        if isinstance(allow, str):
            raise WebhookError(
                "the webhook allow-list must be a list of entries, not one string "
                f"(write [{allow!r}])"
            )
        hosts, networks = parse_allow_list(allow)
        self.allow: tuple[str, ...] = (*hosts, *networks)
        self._policy = AddressPolicy(hosts, networks)
        self._resolver = resolver or system_resolver

    async def pin(self, url: str) -> PinnedURL:
        """Parse, resolve and check ``url``; the pinned target, or :class:`WebhookURLRefused`."""
        parsed = parse_webhook_url(url)
        raw = parsed.raw_host.decode("ascii")
        literal = _literal_address(raw)
        try:
            host = raw if literal is not None else normalize_host_name(raw)
        except ValueError as exc:
            raise WebhookURLRefused(f"refused webhook URL {shown_url(url)}: {exc}") from None
        if literal is None and (host.startswith("*") or not _HOST_NAME.fullmatch(host)):
            raise WebhookURLRefused(
                f"refused webhook URL {shown_url(url)}: {host!r} is not a valid host name"
            )
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        if literal is not None:
            found: Sequence[str] = [str(literal)]
        else:
            try:
                found = await self._resolver(host, port)
            except OSError as exc:
                raise WebhookURLRefused(
                    f"cannot resolve the host {host!r} of webhook URL {shown_url(url)}: "
                    f"{exc.strerror or exc}"
                ) from None
            except UnicodeError as exc:
                raise WebhookURLRefused(
                    f"cannot resolve the host of webhook URL {shown_url(url)}: {exc}"
                ) from None
        addresses: list[IPAddress] = []
        for text in found:
            try:
                addresses.append(ipaddress.ip_address(text))
            except ValueError:
                raise WebhookURLRefused(
                    f"refused webhook URL {shown_url(url)}: {host!r} resolved to {text!r}, "
                    "which is not an address"
                ) from None
        if not addresses:
            raise WebhookURLRefused(f"cannot resolve the host {host!r}: no addresses")
        host_allowed = literal is None and self._policy.host_allowed(host)
        pinned: list[IPAddress] = []
        for address in addresses:
            verdict = self._policy.check(address, host_allowed=host_allowed)
            if not verdict.allowed:
                what = (
                    f"{host!r} is"
                    if str(address) == raw
                    else f"{host!r} resolves to {address}, which is"
                )
                hint = (
                    "webhooks never reach it"
                    if verdict.absolute
                    else "webhooks reach public addresses only (allow an intranet receiver "
                    "with the webhook allow-list: a CIDR such as '10.20.0.0/16' or a host name)"
                )
                raise WebhookURLRefused(
                    f"refused webhook URL {shown_url(url)}: {what} {verdict.refusal}; {hint}"
                )
            if verdict.address not in pinned:
                pinned.append(verdict.address)
        return PinnedURL(url=parsed, host=host, addresses=tuple(pinned))


def _literal_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
