"""The errors of koboi's webhooks, all :class:`koboi.errors.KoboiError`.

Each message says what to fix and never contains a secret.
"""

from __future__ import annotations

from koboi.errors import KoboiError


class WebhookError(KoboiError):
    """A webhook request koboi will not accept: a malformed secret, event type, payload or setting."""


class WebhookURLRefused(WebhookError):
    """A webhook URL that may not be called: bad form, or a host that is not a public address.

    Raised at registration (``enqueue``, ``check_url``); at delivery the same check
    turns into a failed attempt whose ``last_error`` carries this message.
    """


class WebhookHostUnresolved(WebhookURLRefused):
    """A webhook URL whose host name does not resolve (now): nothing can be sent to it."""


class WebhookVerificationError(WebhookError):
    """A received webhook is not authentic or not fresh; the receiver must reject it.

    ``reason`` is one of ``missing_header``, ``bad_timestamp``, ``stale``,
    ``future``, ``bad_signature``, ``bad_body``: short, stable, for metrics and logs.
    """

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason
