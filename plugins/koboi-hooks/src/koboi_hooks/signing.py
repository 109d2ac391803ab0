"""Signing a URL hook's request the way koboi serve signs its webhooks.

Standard Webhooks headers, so a receiver verifies both with the same code
(``koboi_server.webhooks.verify``, the ``standardwebhooks`` package, or the dozen
lines in docs/webhooks.md)::

    webhook-id:        msg_<hex>
    webhook-timestamp: <seconds since 1970>
    webhook-signature: v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>

``key`` is the base64-decoded part of the ``whsec_`` secret. The scheme is a
public specification; it is written here again (thirty lines of the standard
library) so that a hook does not load the server plugin and its web framework.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time

PREFIX = "whsec_"
#: Key sizes the Standard Webhooks specification allows, in bytes.
MIN_KEY_BYTES, MAX_KEY_BYTES = 24, 64


def check_secret(secret: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret; ValueError (never quoting it) if malformed."""
    if not secret.startswith(PREFIX):
        raise ValueError(
            "secret: write 'whsec_<base64 key>' (the format koboi serve's webhooks use)"
        )
    try:
        key = base64.b64decode(secret[len(PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("secret: the part after 'whsec_' is not valid base64") from None
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise ValueError(
            f"secret: the key must be {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes, not {len(key)}"
        )
    return key


def signed_headers(secret: str | None, body: bytes, *, now: float | None = None) -> dict[str, str]:
    """The id and timestamp headers of one request, and its signature when there is a secret."""
    msg_id = "msg_" + secrets.token_hex(13)
    stamp = int(time.time() if now is None else now)
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(stamp)}
    if secret is not None:
        content = f"{msg_id}.{stamp}.".encode() + body
        digest = hmac.new(check_secret(secret), content, hashlib.sha256).digest()
        headers["webhook-signature"] = "v1," + base64.b64encode(digest).decode()
    return headers
