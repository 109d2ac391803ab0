"""Signed, durable webhooks for ``koboi serve`` (a library: no FastAPI here).

Sending (the server)::

    from koboi_server.webhooks import WebhookDispatcher, generate_secret

    dispatcher = WebhookDispatcher(store, allow=["10.20.0.0/16"])
    async with anyio.create_task_group() as tg:
        await tg.start(dispatcher.run)
        delivery_id = await dispatcher.enqueue(
            "https://hooks.example.com/koboi", secret, "job.finished", {"job_id": "..."}
        )

Receiving (any Python service; :func:`verify` needs only the standard library)::

    from koboi_server.webhooks import WebhookVerificationError, verify

    try:
        event = verify(secret, request.headers, raw_body)
    except WebhookVerificationError as exc:
        return 400, exc.reason

See ``docs/webhooks.md`` for the wire format, the guarantees and the settings.
Importing this package is cheap: the dispatcher (httpx) and the settings
(pydantic) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koboi_server.webhooks.errors import WebhookError, WebhookURLRefused, WebhookVerificationError
from koboi_server.webhooks.signing import (
    generate_secret,
    new_message_id,
    sign,
    signature_header,
    verify,
    webhook_headers,
)

if TYPE_CHECKING:
    from koboi_server.webhooks.delivery import Attempt, Backoff, DeliveryStatus, WebhookDelivery
    from koboi_server.webhooks.dispatcher import WebhookDispatcher
    from koboi_server.webhooks.settings import WebhookEndpoint, WebhookSettings
    from koboi_server.webhooks.url_guard import WebhookURLPolicy

__all__ = [
    "Attempt",
    "Backoff",
    "DeliveryStatus",
    "WebhookDelivery",
    "WebhookDispatcher",
    "WebhookEndpoint",
    "WebhookError",
    "WebhookSettings",
    "WebhookURLPolicy",
    "WebhookURLRefused",
    "WebhookVerificationError",
    "generate_secret",
    "new_message_id",
    "sign",
    "signature_header",
    "verify",
    "webhook_headers",
]

_LAZY = {
    "Attempt": "koboi_server.webhooks.delivery",
    "Backoff": "koboi_server.webhooks.delivery",
    "DeliveryStatus": "koboi_server.webhooks.delivery",
    "WebhookDelivery": "koboi_server.webhooks.delivery",
    "WebhookDispatcher": "koboi_server.webhooks.dispatcher",
    "WebhookEndpoint": "koboi_server.webhooks.settings",
    "WebhookSettings": "koboi_server.webhooks.settings",
    "WebhookURLPolicy": "koboi_server.webhooks.url_guard",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
