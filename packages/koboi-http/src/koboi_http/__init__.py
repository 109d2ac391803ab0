"""The HTTP code koboi's plugins share: the model providers' base (``HTTPProvider``),
the SSRF guard with its address pinning (``koboi_http.guard``,
``koboi_http.pinning``) for URLs that come from a model or an API client, and
the one factory of outbound clients (``koboi_http.client``), whose requests run
the request hooks plugins register (``RequestHook``; koboi-http is also the
plugin ``http`` that defines that hook and propagates the W3C trace context).

Names are imported lazily: a provider plugin's ``plugin.py`` can import its
options model (``koboi_http.options``), and the server the guard, without
pulling in httpx, so that ``koboi --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_http._version import __version__
    from koboi_http.guard import AddressPolicy
    from koboi_http.hooks import OutboundRequest, RequestHook
    from koboi_http.keys import looks_like_placeholder, resolve_api_key
    from koboi_http.options import HTTPProviderOptions
    from koboi_http.outbound import client, hook_failures, instrument
    from koboi_http.pinning import (
        AddressRefused,
        HostUnresolved,
        PinnedTarget,
        pin,
        pinned_client,
        send_pinned,
    )
    from koboi_http.provider import HTTPProvider
    from koboi_http.retry import RetryPolicy, is_retryable_status, retry_after_seconds
    from koboi_http.sse import SSEDecoder, SSEEvent, aiter_sse

_WHERE = {
    "__version__": "koboi_http._version",
    "AddressPolicy": "koboi_http.guard",
    "AddressRefused": "koboi_http.pinning",
    "HTTPProvider": "koboi_http.provider",
    "HTTPProviderOptions": "koboi_http.options",
    "HostUnresolved": "koboi_http.pinning",
    "OutboundRequest": "koboi_http.hooks",
    "RequestHook": "koboi_http.hooks",
    "PinnedTarget": "koboi_http.pinning",
    "RetryPolicy": "koboi_http.retry",
    "SSEDecoder": "koboi_http.sse",
    "SSEEvent": "koboi_http.sse",
    "aiter_sse": "koboi_http.sse",
    "client": "koboi_http.outbound",
    "hook_failures": "koboi_http.outbound",
    "instrument": "koboi_http.outbound",
    "is_retryable_status": "koboi_http.retry",
    "looks_like_placeholder": "koboi_http.keys",
    "pin": "koboi_http.pinning",
    "pinned_client": "koboi_http.pinning",
    "resolve_api_key": "koboi_http.keys",
    "retry_after_seconds": "koboi_http.retry",
    "send_pinned": "koboi_http.pinning",
}

__all__ = [
    "AddressPolicy",
    "AddressRefused",
    "HTTPProvider",
    "HTTPProviderOptions",
    "HostUnresolved",
    "OutboundRequest",
    "PinnedTarget",
    "RequestHook",
    "RetryPolicy",
    "SSEDecoder",
    "SSEEvent",
    "__version__",
    "aiter_sse",
    "client",
    "hook_failures",
    "instrument",
    "is_retryable_status",
    "looks_like_placeholder",
    "pin",
    "pinned_client",
    "resolve_api_key",
    "retry_after_seconds",
    "send_pinned",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'koboi_http' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
