"""Fetching one document over http(s) for ingestion, under koboi-http's SSRF guard.

Each hop: the URL's host is resolved and every address checked
(:func:`koboi_http.pinning.pin`; loopback, private, link-local, metadata…
refused unless ``rag.http.allow_hosts``/``allow_networks`` lets them through),
the request goes to the checked address only, and a redirect's target goes
through the same check before anything is sent to it. The body is read as a
stream and refused past ``rag.max_document_size_mb``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import httpx

from koboi_http.guard import AddressPolicy
from koboi_http.hooks import FETCH
from koboi_http.pinning import AddressRefused, HostUnresolved, pin, pinned_client, send_pinned
from koboi_rag.hookspecs import ParseError

if TYPE_CHECKING:
    from koboi_rag.sources import SourceContext

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


async def fetch_document(url: str, context: SourceContext) -> tuple[bytes, str]:
    """The body and media type of ``url``; :class:`ParseError` says why not, in one line."""
    settings = context.settings.http
    policy = AddressPolicy(settings.allow_hosts, settings.allow_networks)
    resolver = context.extras.get("resolver")
    transport = context.extras.get("transport")
    try:
        current = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ParseError(f"not a valid URL: {exc}") from None
    hops = 0
    try:
        with anyio.fail_after(settings.timeout_seconds):
            while True:
                if current.scheme not in ("http", "https"):
                    raise ParseError(f"refused {current}: only http and https are fetched")
                try:
                    target = await pin(current, policy, resolver)
                except AddressRefused as exc:
                    where = "a redirect to " if hops else ""
                    raise ParseError(
                        f"refused {where}{current}: {exc.reason}; documents come from public "
                        "addresses only (allow intranet hosts with rag.http.allow_hosts or "
                        "allow_networks)"
                    ) from None
                except HostUnresolved as exc:
                    raise ParseError(f"cannot resolve host {exc.host!r}: {exc.reason}") from None
                async with pinned_client(
                    timeout=settings.timeout_seconds,
                    connect_timeout=min(10.0, settings.timeout_seconds),
                    transport=transport,
                    peer=FETCH,
                ) as client:
                    response, _ = await send_pinned(
                        client, "GET", target, headers={"User-Agent": "koboi-rag"}
                    )
                    try:
                        location = response.headers.get("location")
                        if response.status_code in _REDIRECTS and location:
                            hops += 1
                            if hops > settings.max_redirects:
                                raise ParseError(
                                    f"too many redirects (more than {settings.max_redirects})"
                                )
                            current = current.join(location.strip())
                            continue
                        if response.status_code >= 400:
                            raise ParseError(f"the server answered status {response.status_code}")
                        declared = response.headers.get("content-length")
                        if declared and declared.isdigit() and int(declared) > context.max_bytes:
                            raise ParseError(_too_large(int(declared), context.max_bytes))
                        body = bytearray()
                        async for piece in response.aiter_bytes():
                            body.extend(piece)
                            if len(body) > context.max_bytes:
                                raise ParseError(_too_large(len(body), context.max_bytes, True))
                        media_type = response.headers.get("content-type", "").split(";")[0]
                        return bytes(body), media_type.strip().lower()
                    finally:
                        await response.aclose()
    except TimeoutError:
        raise ParseError(f"timed out after {settings.timeout_seconds:g} s") from None
    except httpx.HTTPError as exc:
        raise ParseError(f"fetching failed: {type(exc).__name__}: {exc or 'no detail'}") from None


def _too_large(size: int, limit: int, partial: bool = False) -> str:
    more = "more than " if partial else ""
    return (
        f"{more}{size / 1e6:.1f} MB is over rag.max_document_size_mb ({limit / 1e6:g} MB); "
        "raise it to index this document"
    )
