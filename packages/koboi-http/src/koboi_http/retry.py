"""When to send a failed request again, and how long to wait first."""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

#: 4xx statuses worth a second try; every other 4xx means the request itself is wrong.
RETRYABLE_4XX = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    """True for 408, 409, 429 and every 5xx."""
    return status in RETRYABLE_4XX or status >= 500


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The server's ``Retry-After`` (delta seconds or an HTTP date), or None.

    Also reads ``retry-after-ms``, which some model APIs send for sub-second waits.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = -1.0
        if value >= 0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = parsed.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, bounded, honouring ``Retry-After``.

    Attempt ``n`` (1-based) waits a random time in ``[0, min(max_delay,
    initial_delay * 2**(n-1))]``; when the server sent ``Retry-After`` the
    wait is at least that. A ``Retry-After`` longer than ``max_retry_after``
    is not waited for: the error is raised instead, saying how long the
    server asked for.
    """

    max_retries: int = 2
    initial_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        ceiling = min(self.max_delay, self.initial_delay * (2 ** (attempt - 1)))
        backoff = random.uniform(0.0, ceiling)  # jitter, not cryptography
        if retry_after is not None:
            return max(backoff, retry_after)
        return backoff
