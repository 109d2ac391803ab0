"""Request hooks: what a plugin registers to add headers to, and observe, outbound requests.

A :class:`RequestHook` is registered through koboi-http's hook
``koboi_http_register_request_hooks`` (see :mod:`koboi_http.hookspecs`). Every
client koboi-http builds (:func:`koboi_http.client`, ``HTTPProvider``,
:func:`koboi_http.pinning.pinned_client`) calls the hooks of the plugin host
of the run it serves, for every request it sends:

- ``on_request(request)`` just before the request goes out: it may add or
  change headers (``request.headers``);
- ``on_response(request, response, seconds)`` once the response's status and
  headers have arrived (its body may still be arriving): it observes.

Both are sync and must be cheap: they run on the event loop, in the request's
own task. Neither may break the request: an exception is logged and counted
(:func:`koboi_http.outbound.hook_failures`), and the request goes on.

This module imports neither httpx nor anything heavy at run time: a plugin's
``plugin.py`` may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

    from koboi.interceptors import RunInfo
    from koboi.tracing import TraceContext

__all__ = [
    "FETCH",
    "OTHER",
    "PEERS",
    "PROVIDER",
    "SEARCH",
    "WEBHOOK",
    "OutboundRequest",
    "RequestHook",
]

#: A model provider's API (``base_url`` comes from the operator's config).
PROVIDER = "provider"
#: A web_search backend (Brave, DuckDuckGo, Firecrawl or the configured base_url).
SEARCH = "search"
#: A URL a model asked web_fetch for: anywhere on the public web.
FETCH = "fetch"
#: A webhook receiver: a URL an API client gave the server.
WEBHOOK = "webhook"
#: A client that did not say whom it talks to.
OTHER = "other"
#: The peers koboi's own clients name (a third-party client may name others).
PEERS = (PROVIDER, SEARCH, FETCH, WEBHOOK, OTHER)


@dataclass(eq=False)
class OutboundRequest:
    """One request about to be sent (or sent), as a request hook sees it.

    ``httpx_request`` is the request itself: hooks change its headers (through
    :attr:`headers`), never its URL or body. ``peer`` says what kind of server
    it goes to (:data:`PROVIDER`, :data:`SEARCH`, :data:`FETCH`,
    :data:`WEBHOOK`, :data:`OTHER` or a name a third-party client chose);
    ``run`` is the run the request is made for (None outside a run).
    """

    httpx_request: httpx.Request
    peer: str
    run: RunInfo | None = None

    @property
    def headers(self) -> httpx.Headers:
        """The request's headers (mutable: add to them in ``on_request``)."""
        return self.httpx_request.headers

    @property
    def method(self) -> str:
        return self.httpx_request.method

    @property
    def url(self) -> httpx.URL:
        """The URL requested. For a pinned request (web_fetch, webhooks) its host is the
        checked IP address; :attr:`host` is the name."""
        return self.httpx_request.url

    @property
    def host(self) -> str:
        """The host the request is for, without the port: the ``Host`` header's name
        (the URL's host when there is none), lower case."""
        value = str(self.httpx_request.headers.get("host", "")).lower()
        if not value:
            return str(self.httpx_request.url.host).lower()
        if value.startswith("["):  # an IPv6 literal, maybe with a port
            end = value.find("]")
            return value[1:end] if end > 0 else value
        return value.rpartition(":")[0] if value.count(":") == 1 else value

    @property
    def trace(self) -> TraceContext | None:
        """The trace context of the run the request is made for (None outside a run)."""
        return self.run.trace if self.run is not None else None


class RequestHook:
    """Base class of request hooks: override what you need (both default to nothing).

    The name it is registered under labels it in logs and failure counts.
    Both methods are sync, run on the event loop
    for every request, and must be cheap (no I/O, no waiting): hand slow work
    (exporting spans, metrics) to something that runs elsewhere. An exception
    from either is logged and counted, never raised into the request.
    """

    def on_request(self, request: OutboundRequest) -> None:
        """Called just before ``request`` is sent; may add or change its headers.

        Called once per attempt (a provider's retry is a new request) and never
        again for the same request.
        """

    def on_response(
        self, request: OutboundRequest, response: httpx.Response, seconds: float
    ) -> None:
        """Called when ``response``'s status and headers have arrived for ``request``.

        ``seconds`` is the time from just before sending (after every hook's
        ``on_request``) to the response's head. The body may still be streaming:
        do not read it. Not called for a request that got no response (a
        connection error, a timeout): that failure reaches the caller as usual.
        """
