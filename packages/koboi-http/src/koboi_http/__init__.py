"""The HTTP layer shared by koboi's model providers (see ``HTTPProvider``).

Names are imported lazily: a provider plugin's ``plugin.py`` can import its
options model (``koboi_http.options``) without pulling in httpx, so that
``koboi --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_http.keys import looks_like_placeholder, resolve_api_key
    from koboi_http.options import HTTPProviderOptions
    from koboi_http.provider import HTTPProvider
    from koboi_http.retry import RetryPolicy, is_retryable_status, retry_after_seconds
    from koboi_http.sse import SSEDecoder, SSEEvent, aiter_sse

_WHERE = {
    "HTTPProvider": "koboi_http.provider",
    "HTTPProviderOptions": "koboi_http.options",
    "RetryPolicy": "koboi_http.retry",
    "SSEDecoder": "koboi_http.sse",
    "SSEEvent": "koboi_http.sse",
    "aiter_sse": "koboi_http.sse",
    "is_retryable_status": "koboi_http.retry",
    "looks_like_placeholder": "koboi_http.keys",
    "resolve_api_key": "koboi_http.keys",
    "retry_after_seconds": "koboi_http.retry",
}

__all__ = [
    "HTTPProvider",
    "HTTPProviderOptions",
    "RetryPolicy",
    "SSEDecoder",
    "SSEEvent",
    "aiter_sse",
    "is_retryable_status",
    "looks_like_placeholder",
    "resolve_api_key",
    "retry_after_seconds",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'koboi_http' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
