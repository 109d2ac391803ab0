"""URL hooks: POST the event to a receiver, behind koboi-http's SSRF guard.

The receiver's address is resolved once, every answer is checked by
``koboi_http.guard.AddressPolicy`` (loopback, private, link-local, metadata...
refused unless ``hooks.url_allow`` lets them through; cloud metadata never),
and the request goes to that checked address only (``koboi_http.pinning``):
no second lookup, no proxy from the environment, no redirect followed. httpx
is imported when a URL hook first runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from koboi_http.guard import (
    AddressPolicy,
    Resolver,
    normalize_allowed_host,
    normalize_allowed_network,
)

if TYPE_CHECKING:
    import httpx

USER_AGENT = "koboi-hooks/0.1"


class PostFailed(Exception):
    """The request could not be made or answered (the message says why, without secrets)."""


def check_url(url: str) -> None:
    """What can be checked of a hook URL when the config loads (no DNS): ValueError if bad."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise ValueError(f"url: not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise ValueError("url: only http:// and https:// URLs with a host are called")
    if parsed.userinfo:
        raise ValueError("url: user:password@ is not sent; sign requests with 'secret' instead")


def shown_url(url: str) -> str:
    """Scheme, host and port of a URL, for messages and the journal (its path may hold a
    token: a chat service's incoming-webhook URL is itself a credential)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        where = parts.hostname or ""
        if parts.port:
            where += f":{parts.port}"
    except ValueError:
        return "<invalid url>"
    rest = "/..." if parts.path not in ("", "/") or parts.query else "/"
    return f"{parts.scheme}://{where}{rest}"


def address_policy(entries: Sequence[str]) -> AddressPolicy:
    """The guard's policy for ``hooks.url_allow`` (hosts, ``*.suffix``, addresses, CIDRs);
    ValueError naming a malformed entry."""
    hosts: list[str] = []
    networks: list[str] = []
    for entry in entries:
        text = entry.strip()
        try:
            if "/" in text:
                networks.append(normalize_allowed_network(text))
            else:
                hosts.append(normalize_allowed_host(text))
        except ValueError as exc:
            raise ValueError(
                f"url_allow: {exc} (write a host 'hooks.corp', '*.corp', an address or a "
                "CIDR network '10.0.0.0/8')"
            ) from None
    return AddressPolicy(hosts, networks)


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


async def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    policy: AddressPolicy,
    timeout: float,
    max_bytes: int,
    resolver: Resolver | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Answer:
    """POST ``body`` to the checked address of ``url``; the status and at most ``max_bytes``+1."""
    import anyio
    import httpx

    from koboi_http.pinning import AddressRefused, HostUnresolved, pin, pinned_client, send_pinned

    parsed = httpx.URL(url)
    try:
        with anyio.fail_after(timeout):
            target = await pin(parsed, policy, resolver)
            async with pinned_client(
                timeout=timeout,
                connect_timeout=min(timeout, 5.0),
                transport=transport,
                peer="webhook",
            ) as client:
                sent = {
                    "Content-Type": "application/json",
                    "User-Agent": USER_AGENT,
                    **headers,
                }
                response, _address = await send_pinned(
                    client, "POST", target, headers=sent, content=body
                )
                try:
                    received = bytearray()
                    async for chunk in response.aiter_bytes():
                        received += chunk
                        if len(received) > max_bytes:
                            break
                finally:
                    await response.aclose()
                return Answer(response.status_code, bytes(received))
    except TimeoutError:
        raise PostFailed(f"no answer within {timeout:g} s") from None
    except (AddressRefused, HostUnresolved) as exc:
        raise PostFailed(str(exc)) from None
    except httpx.HTTPError as exc:
        raise PostFailed(f"{type(exc).__name__}: {exc}") from None
