"""``web_fetch``'s engine: resolve, check, pin, request, follow redirects by hand, read capped.

Every hop goes through the same steps:

1. parse the URL with httpx's own parser (what would be requested is what is
   checked); only ``http``/``https``, no ``user:password@``;
2. resolve the host *ourselves* (an injectable resolver, by default
   ``getaddrinfo`` in a worker thread) and check **every** address with
   :class:`~koboi_http.guard.AddressPolicy`: one refused address refuses
   the host (:func:`koboi_http.pinning.pin`);
3. connect to a checked address and nothing else: the request URL is
   rewritten to that IP, with the ``Host`` header and, for https, TLS SNI and
   certificate verification kept on the name
   (:func:`koboi_http.pinning.send_pinned`). No second lookup happens, so a
   DNS answer that changes between the check and the connection (rebinding)
   changes nothing;
4. a redirect is not followed by httpx (``follow_redirects=False``): its
   target goes back to step 1, up to ``max_redirects`` hops, before any
   connection to it.

The body is read as a stream under a byte cap (reading stops past it, with
gzip/deflate decoded in bounded steps so a small compressed body cannot
expand without limit) and the whole call runs under one deadline.
"""

from __future__ import annotations

import codecs
import json
import re
import ssl
import zlib
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from koboi.errors import ToolError
from koboi_http.guard import AddressPolicy, IPAddress, Resolver, system_resolver
from koboi_http.hooks import FETCH
from koboi_http.pinning import (
    AddressRefused,
    HostUnresolved,
    PinnedTarget,
    pinned_client,
    send_pinned,
)
from koboi_http.pinning import (
    pin as pin_host,
)
from koboi_tools_web.config import WebSettings
from koboi_tools_web.html_text import html_to_text

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_JSON_TYPES = frozenset({"application/json", "application/ld+json"})
_XML_TYPES = frozenset({"application/xml", "text/xml"})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.I)
_PREVIEW = 200


class FetchRefused(ToolError):
    """web_fetch will not fetch this URL (scheme, host or address); nothing was sent."""


@dataclass
class FetchResult:
    """A fetched page as text, with what the model needs to judge it."""

    url: str
    final_url: str
    status: int
    reason: str
    content_type: str
    title: str
    text: str
    redirects: list[str] = field(default_factory=list)
    bytes_read: int = 0
    truncated: list[str] = field(default_factory=list)
    connected_to: str = ""

    def render(self) -> str:
        """The text the model reads."""
        head = [f"URL: {self.final_url}"]
        if self.redirects:
            head.append(f"Redirected from: {' -> '.join([self.url, *self.redirects[:-1]])}")
        head.append(f"Status: {self.status} {self.reason}".rstrip())
        head.append(f"Content-Type: {self.content_type or 'unknown'}")
        if self.title:
            head.append(f"Title: {self.title}")
        head.extend(f"Truncated: {note}" for note in self.truncated)
        return "\n".join(head) + "\n\n" + self.text

    def data(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "final_url": self.final_url,
            "status": self.status,
            "content_type": self.content_type,
            "title": self.title,
            "redirects": self.redirects,
            "bytes_read": self.bytes_read,
            "truncated": bool(self.truncated),
        }


class WebFetcher:
    """Fetches model-given URLs under the SSRF guard and the size and time caps.

    ``resolver`` and ``verify`` exist for tests (a resolver that lies, a test
    CA); ``transport`` lets a test observe or stop every request that would
    reach the network.
    """

    def __init__(
        self,
        settings: WebSettings,
        *,
        resolver: Resolver | None = None,
        verify: ssl.SSLContext | bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.policy = AddressPolicy(settings.allow_hosts, settings.allow_networks)
        self.resolver = resolver or system_resolver
        self.verify = verify
        self.transport = transport

    # -- the whole call -----------------------------------------------------

    async def fetch(self, url: str, max_chars: int) -> FetchResult:
        """Fetch ``url`` and return its text; ``ToolError`` says why not."""
        limit = self.settings.timeout
        try:
            with anyio.fail_after(limit):
                return await self._fetch(url, max_chars, anyio.current_time() + limit)
        except TimeoutError:
            raise ToolError(
                f"timed out: fetching {_shown(url)} took longer than {limit:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise ToolError(f"fetching {_shown(url)} failed: {_error_text(exc)}") from None

    async def _fetch(self, url: str, max_chars: int, deadline: float) -> FetchResult:
        current = parse_url(url)
        redirects: list[str] = []
        while True:
            try:
                target = await self.pin(current)
            except FetchRefused as exc:
                if not redirects:
                    raise
                raise FetchRefused(f"not following a redirect: {exc}") from None
            async with self._client() as client:
                response, connected = await self._send(client, target)
                try:
                    location = response.headers.get("location")
                    if response.status_code in _REDIRECTS and location:
                        if len(redirects) >= self.settings.max_redirects:
                            raise ToolError(
                                f"too many redirects: {_shown(url)} redirected more than "
                                f"{self.settings.max_redirects} times"
                            )
                        try:
                            current = parse_url(str(current.join(location.strip())))
                        except httpx.InvalidURL as exc:
                            raise ToolError(
                                f"the server redirected to an invalid URL {_shown(location)}: {exc}"
                            ) from None
                        except FetchRefused as exc:
                            raise FetchRefused(f"not following a redirect: {exc}") from None
                        redirects.append(str(current))
                        continue
                    return await self._read(
                        response, url, current, redirects, connected, max_chars, deadline
                    )
                finally:
                    await response.aclose()

    # -- steps 1-3: check and pin ---------------------------------------------

    async def pin(self, url: httpx.URL) -> PinnedTarget:
        """Resolve ``url``'s host and check every address; refuse or return the pinned target."""
        try:
            return await pin_host(url, self.policy, self.resolver)
        except HostUnresolved as exc:
            raise ToolError(f"cannot resolve host {_shown(exc.host)}: {exc.reason}") from None
        except AddressRefused as exc:
            hint = (
                "web_fetch reaches public addresses only (an operator can allow "
                "intranet hosts with tools_web.allow_hosts or allow_networks)"
                if exc.liftable
                else "web_fetch never reaches it"
            )
            raise FetchRefused(f"refused {_shown(str(url))}: {exc.reason}; {hint}") from None

    def _client(self) -> httpx.AsyncClient:
        # One client per hop: connections are never shared between host names. Peer
        # "fetch": the plugins' request hooks run, but the run's trace id goes to no
        # site a model picked unless http.trace_peers/trace_hosts trust it.
        return pinned_client(
            timeout=self.settings.timeout,
            connect_timeout=self.settings.connect_timeout,
            verify=self.verify,
            transport=self.transport,
            peer=FETCH,
        )

    async def _send(
        self, client: httpx.AsyncClient, target: PinnedTarget
    ) -> tuple[httpx.Response, IPAddress]:
        """Send the GET to the first checked address that accepts a connection."""
        headers = {
            "User-Agent": self.settings.user_agent,
            "Accept": "text/html,application/xhtml+xml,text/*;q=0.9,application/json;q=0.8,"
            "application/xml;q=0.8,*/*;q=0.1",
            "Accept-Encoding": "gzip, deflate",
        }
        try:
            return await send_pinned(client, "GET", target, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ToolError(
                f"cannot connect to {_shown(str(target.url))}: {_error_text(exc)}"
            ) from None

    # -- step 4: the body ---------------------------------------------------

    async def _read(
        self,
        response: httpx.Response,
        url: str,
        final: httpx.URL,
        redirects: list[str],
        connected: IPAddress,
        max_chars: int,
        deadline: float,
    ) -> FetchResult:
        content_type = response.headers.get("content-type", "")
        mime, charset = _parse_content_type(content_type)
        kind = _kind_of(mime)
        if kind is None:
            raise ToolError(
                f"refused {_shown(str(final))}: its content type is {mime}, which is not text; "
                "web_fetch returns text only (text/*, JSON, XML)"
            )
        decoder = _BodyDecoder(response.headers.get("content-encoding", ""))
        cap = self.settings.max_bytes
        body = bytearray()
        raw_read = 0
        truncated: list[str] = []
        with anyio.move_on_after(max(deadline - anyio.current_time() - 0.05, 0)) as scope:
            async for chunk in response.aiter_raw():
                raw_read += len(chunk)
                body += decoder.decode(chunk, cap + 1 - len(body))
                if len(body) > cap or raw_read > cap:
                    del body[cap:]
                    truncated.append(f"stopped reading after {cap} bytes (the size limit)")
                    break
            else:
                body += decoder.flush(cap + 1 - len(body))
                if len(body) > cap:
                    del body[cap:]
                    truncated.append(f"stopped reading after {cap} bytes (the size limit)")
        if scope.cancelled_caught:
            if not body:
                raise TimeoutError
            truncated.append(f"stopped reading at the time limit ({self.settings.timeout:g} s)")
        if kind == "unknown":
            kind = _sniff(bytes(body[:1024]))
            if kind is None:
                raise ToolError(
                    f"refused {_shown(str(final))}: it has no content type and looks binary; "
                    "web_fetch returns text only (text/*, JSON, XML)"
                )
        text = _decode(bytes(body), charset, kind)
        title = ""
        if kind == "html":
            page = html_to_text(text, str(final))
            title, text = page.title, page.text
        elif kind == "json":
            text = _pretty_json(text)
        if len(text) > max_chars:
            text = text[:max_chars]
            truncated.append(f"the text is longer than max_chars={max_chars}")
        return FetchResult(
            url=url,
            final_url=str(final),
            status=response.status_code,
            reason=response.reason_phrase,
            content_type=content_type,
            title=title,
            text=text,
            redirects=redirects,
            bytes_read=len(body),
            truncated=truncated,
            connected_to=str(connected),
        )


# -- helpers -----------------------------------------------------------------


def parse_url(url: str) -> httpx.URL:
    """httpx's reading of ``url``, if web_fetch may request it at all (not yet resolved)."""
    text = url.strip()
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise FetchRefused(f"not a valid URL {_shown(text)}: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise FetchRefused(
            f"refused {_shown(text)}: only http and https URLs can be fetched"
            + (f", not {parsed.scheme}:" if parsed.scheme else " (the URL has no scheme)")
        )
    if not parsed.raw_host:
        raise FetchRefused(f"refused {_shown(text)}: the URL has no host")
    if parsed.userinfo:
        raise FetchRefused(f"refused {_shown(text)}: URLs with user:password@ are not fetched")
    return parsed


def _shown(url: str) -> str:
    return repr(url if len(url) <= _PREVIEW else url[: _PREVIEW - 3] + "...")


def _error_text(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _parse_content_type(value: str) -> tuple[str, str | None]:
    mime, _, rest = value.partition(";")
    charset = None
    for param in rest.split(";"):
        name, _, val = param.partition("=")
        if name.strip().lower() == "charset" and val.strip():
            charset = val.strip().strip("\"'")
    return mime.strip().lower(), charset


def _kind_of(mime: str) -> str | None:
    """The kind of body: html, json, xml, text, unknown (no type given) or None (binary)."""
    if not mime:
        return "unknown"
    if mime in _HTML_TYPES:
        return "html"
    if mime in _JSON_TYPES or mime.endswith("+json"):
        return "json"
    if mime in _XML_TYPES or mime.endswith("+xml"):
        return "xml"
    if mime.startswith("text/"):
        return "text"
    return None


def _sniff(head: bytes) -> str | None:
    """Kind of an untyped body from its start, or None when it looks binary."""
    if b"\x00" in head:
        return None
    try:
        sample = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a character cut at the end of the sample
            return None
        sample = head[: exc.start].decode("utf-8")
    lowered = sample.lstrip().lower()
    if lowered.startswith(("<!doctype html", "<html")):
        return "html"
    return "text"


def _decode(body: bytes, charset: str | None, kind: str) -> str:
    encoding = "utf-8"
    if body.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    elif body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    elif charset:
        encoding = charset
    elif kind == "html":
        match = _META_CHARSET.search(body[:4096])
        if match:
            encoding = match.group(1).decode("ascii")
    try:
        codecs.lookup(encoding)
    except LookupError:
        encoding = "utf-8"
    return body.decode(encoding, errors="replace")


def _pretty_json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text  # truncated or malformed: show it as it came


class _BodyDecoder:
    """Undo gzip/deflate in steps of bounded output (a decompression bomb stays bounded)."""

    def __init__(self, encoding: str) -> None:
        name = encoding.strip().lower()
        self._raw_deflate_tried = False
        if name in ("", "identity"):
            self._zlib: Any = None
        elif name in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif name == "deflate":
            self._zlib = zlib.decompressobj(zlib.MAX_WBITS)
        else:
            raise ToolError(f"the server sent an unsupported content encoding {encoding!r}")
        self._deflate = name == "deflate"

    def decode(self, chunk: bytes, budget: int) -> bytes:
        if self._zlib is None:
            return chunk
        budget = max(budget, 1)
        try:
            data = self._zlib.unconsumed_tail + chunk
            return bytes(self._zlib.decompress(data, budget))
        except zlib.error:
            if self._deflate and not self._raw_deflate_tried:
                # "deflate" is often sent raw, without the zlib header.
                self._raw_deflate_tried = True
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                return bytes(self._zlib.decompress(chunk, budget))
            raise ToolError("the server sent a body that does not decompress") from None

    def flush(self, budget: int) -> bytes:
        if self._zlib is None:
            return b""
        return bytes(self._zlib.decompress(self._zlib.unconsumed_tail, max(budget, 1)))
