"""Which webhook URLs koboi may POST to, and the address each delivery is pinned to.

A webhook URL comes from an API client, so without a check it would be a way to
make the server send requests into its own network (SSRF): to loopback
services, the cloud metadata endpoint, the database. The check is made on
*addresses*, never on how the URL spells its host:

1. the URL is parsed by httpx (what is checked is what would be requested):
   ``http``/``https`` only, a host, no ``user:password@``;
2. the host is resolved here (every notation, ``127.1``, ``0x7f000001``,
   ``2130706433``, ``[::ffff:127.0.0.1]``, or a name pointing inside, ends up as
   an address) and *every* address is classified by koboi-http's guard
   (:mod:`koboi_http.guard`, shared with ``web_fetch`` so the two cannot
   drift): loopback, private, link-local, unique-local, CGNAT, multicast,
   reserved and cloud-metadata addresses are refused; one refused address
   refuses the host;
3. the delivery connects to a checked address and nothing else
   (:mod:`koboi_http.pinning`, again shared with ``web_fetch``): the request
   goes to the IP, with the ``Host`` header and, for https, SNI and certificate
   verification kept on the name. There is no second lookup, so a DNS answer
   that changes between check and connect (rebinding) changes nothing.

The check runs at registration — for an endpoint of the config, what needs no
DNS (an address, ``localhost``, a name of the allow-list) when the config loads
and the rest when the server starts; for a job's webhook when the job is
submitted — and again before every attempt. An explicit
allow-list lets intranet receivers through: CIDR networks (``10.20.0.0/16``),
addresses, host names (``hooks.corp``) and suffixes (``*.corp``). Cloud
metadata addresses stay refused whatever the allow-list says.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from koboi_http.guard import (
    AddressPolicy,
    Resolver,
    literal_address,
    normalize_allowed_host,
    normalize_allowed_network,
    normalize_host_name,
    system_resolver,
)
from koboi_http.pinning import AddressRefused, HostUnresolved, PinnedTarget, pin
from koboi_server.webhooks.errors import WebhookError, WebhookHostUnresolved, WebhookURLRefused

if TYPE_CHECKING:
    import httpx

__all__ = ["WebhookURLPolicy", "parse_allow_list", "parse_webhook_url"]

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
        try:
            if "/" in text:
                networks.append(normalize_allowed_network(text))
                continue
            host = normalize_allowed_host(text)
        except ValueError as exc:
            raise WebhookError(f"webhook allow-list entry {exc}") from None
        if literal_address(host) is None and not _HOST_NAME.fullmatch(host):
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

    def check_without_dns(self, url: str) -> bool:
        """Check what can be checked of ``url`` without a DNS lookup (when a config loads).

        True when the verdict is final: an address literal, a ``localhost`` name (RFC
        6761: always loopback), or a name the allow-list lets through. False when the
        host is another name, whose addresses only a lookup tells (:meth:`pin` then,
        at start-up and before every delivery). Raises :class:`WebhookURLRefused` with
        the message :meth:`pin` would give.
        """
        parsed = parse_webhook_url(url)
        raw = parsed.raw_host.decode("ascii")
        literal = literal_address(raw)
        if literal is not None:
            addresses = [literal]
            host, host_allowed = raw, False
        else:
            host = self._host_name(url, raw)
            host_allowed = self._policy.host_allowed(host)
            if host != "localhost" and not host.endswith(".localhost"):
                return host_allowed
            addresses = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
        for address in addresses:
            verdict = self._policy.check(address, host_allowed=host_allowed)
            if not verdict.allowed:
                what = f"{host!r} is" if literal is not None else f"{host!r} is {address},"
                raise WebhookURLRefused(
                    f"refused webhook URL {shown_url(url)}: {what} {verdict.refusal}; "
                    + _hint(liftable=not verdict.absolute)
                )
        return True

    def _host_name(self, url: str, raw: str) -> str:
        try:
            host = normalize_host_name(raw)
        except ValueError as exc:
            raise WebhookURLRefused(f"refused webhook URL {shown_url(url)}: {exc}") from None
        if host.startswith("*") or not _HOST_NAME.fullmatch(host):
            raise WebhookURLRefused(
                f"refused webhook URL {shown_url(url)}: {host!r} is not a valid host name"
            )
        return host

    async def pin(self, url: str) -> PinnedTarget:
        """Parse, resolve and check ``url``; the pinned target, or :class:`WebhookURLRefused`
        (:class:`WebhookHostUnresolved` when its host name does not resolve)."""
        parsed = parse_webhook_url(url)
        raw = parsed.raw_host.decode("ascii")
        if literal_address(raw) is None:
            self._host_name(url, raw)
        try:
            return await pin(parsed, self._policy, self._resolver)
        except HostUnresolved as exc:
            raise WebhookHostUnresolved(
                f"cannot resolve the host {shown_url(exc.host)} of webhook URL {shown_url(url)}: "
                f"{exc.reason}"
            ) from None
        except AddressRefused as exc:
            raise WebhookURLRefused(
                f"refused webhook URL {shown_url(url)}: {exc.reason}; "
                + _hint(liftable=exc.liftable)
            ) from None


def _hint(*, liftable: bool) -> str:
    if not liftable:
        return "webhooks never reach it"
    return (
        "webhooks reach public addresses only (allow an intranet receiver with the webhook "
        "allow-list: a CIDR such as '10.20.0.0/16' or a host name)"
    )
