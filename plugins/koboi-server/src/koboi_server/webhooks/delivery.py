"""A webhook delivery as stored, and the retry schedule.

The store holds each delivery as a keyed record (kind ``webhook``, key = the
delivery id). The record also holds the secrets the attempts are signed with;
:class:`WebhookDelivery`, what callers read, does not.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from koboi_server.webhooks.errors import WebhookError

DeliveryStatus = Literal["pending", "delivered", "failed"]
STATUSES: tuple[DeliveryStatus, ...] = ("pending", "delivered", "failed")

#: Store record kinds: the deliveries, and the index of those still pending.
RECORD_KIND = "webhook"
DUE_KIND = "webhook-due"
#: Attempts kept in a delivery's history (the oldest are dropped first).
HISTORY_LIMIT = 20
RECORD_VERSION = 1


@dataclass(frozen=True)
class Backoff:
    """When to try again: ``base * factor ** (failures - 1)`` seconds, capped, with jitter.

    Jitter spreads the retries of many deliveries that failed together (a
    receiver that was down) by up to ``jitter`` of the delay either way, so they
    do not all come back in the same second. The defaults (5 s, x3, capped at an
    hour) with 15 attempts retry for about 8.5 hours.
    """

    base: float = 5.0
    factor: float = 3.0
    cap: float = 3600.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not self.base >= 0:
            raise WebhookError(f"webhook backoff base must be >= 0 seconds, not {self.base}")
        if not self.factor >= 1:
            raise WebhookError(f"webhook backoff factor must be >= 1, not {self.factor}")
        if not self.cap >= self.base:
            raise WebhookError(
                f"webhook backoff cap ({self.cap} s) must be at least its base ({self.base} s)"
            )
        if not 0 <= self.jitter <= 1:
            raise WebhookError(f"webhook backoff jitter must be within 0..1, not {self.jitter}")

    def delay(self, failures: int, *, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after the ``failures``-th failed attempt (1 for the first)."""
        exponent = max(failures - 1, 0)
        try:
            raw = min(self.cap, self.base * self.factor**exponent)
        except OverflowError:
            raw = self.cap
        spread = raw * self.jitter
        return max(0.0, min(self.cap, raw - spread + 2 * spread * rand()))


@dataclass(frozen=True)
class Attempt:
    """One attempt of a delivery: when, by whom, and what came of it."""

    number: int
    at: float
    holder: str
    duration: float
    status_code: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "at": self.at,
            "holder": self.holder,
            "duration": round(self.duration, 6),
            "status_code": self.status_code,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Attempt:
        return cls(
            number=int(data["number"]),
            at=float(data["at"]),
            holder=str(data.get("holder", "")),
            duration=float(data.get("duration", 0.0)),
            status_code=data.get("status_code"),
            error=data.get("error"),
        )


@dataclass(frozen=True)
class WebhookDelivery:
    """What is known about one delivery (its secrets are never part of it).

    ``attempts`` counts the attempts made; ``next_attempt_at`` is when a
    pending delivery is due (epoch seconds), None once it is finished.
    ``body`` is the exact JSON text POSTed on every attempt.
    """

    id: str
    url: str
    event_type: str
    status: DeliveryStatus
    attempts: int
    max_attempts: int
    created_at: float
    next_attempt_at: float | None
    body: str = field(repr=False)
    last_attempt_at: float | None = None
    delivered_at: float | None = None
    last_status_code: int | None = None
    last_error: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    history: tuple[Attempt, ...] = ()

    @property
    def payload(self) -> Any:
        """The ``data`` the delivery carries (as given to ``enqueue``)."""
        return json.loads(self.body)["data"]

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> WebhookDelivery:
        return cls(
            id=str(data["id"]),
            url=str(data["url"]),
            event_type=str(data["event_type"]),
            status=data["status"],
            attempts=int(data["attempts"]),
            max_attempts=int(data["max_attempts"]),
            created_at=float(data["created_at"]),
            next_attempt_at=_float_or_none(data.get("next_attempt_at")),
            body=str(data["body"]),
            last_attempt_at=_float_or_none(data.get("last_attempt_at")),
            delivered_at=_float_or_none(data.get("delivered_at")),
            last_status_code=data.get("last_status_code"),
            last_error=data.get("last_error"),
            metadata=dict(data.get("metadata") or {}),
            history=tuple(Attempt.from_json(a) for a in data.get("history") or ()),
        )


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
