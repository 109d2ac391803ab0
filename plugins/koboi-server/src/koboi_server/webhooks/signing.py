"""Standard-Webhooks signatures: secrets, message ids, signing, and the receiver's verifier.

A delivery carries three headers::

    webhook-id:        msg_01J9Z3M8Q4C7V5X2N6B8D0F1G3   (the same on every attempt)
    webhook-timestamp: 1718000000                        (seconds; the time of this attempt)
    webhook-signature: v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=

The signature is ``base64(HMAC-SHA256(key, f"{id}.{timestamp}.{body}"))`` where
``key`` is the base64-decoded part of the secret after ``whsec_`` and ``body``
the exact bytes of the request body. While a secret is being rotated the header
carries one ``v1,<sig>`` per secret, separated by spaces; a receiver accepts the
delivery when any of them matches any secret it knows.

This module needs only the standard library (and koboi's error class), so a
receiver can use :func:`verify` as it is; ``docs/webhooks.md`` also shows the
same check in a dozen self-contained lines.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from koboi_server.webhooks.errors import WebhookError, WebhookVerificationError

__all__ = [
    "HEADER_ID",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "SECRET_PREFIX",
    "generate_secret",
    "new_message_id",
    "sign",
    "signature_header",
    "verify",
    "webhook_headers",
]

HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"
SECRET_PREFIX = "whsec_"

#: Key sizes the Standard Webhooks specification allows (bytes after base64 decoding).
MIN_KEY_BYTES = 24
MAX_KEY_BYTES = 64
_GENERATED_KEY_BYTES = 32
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

Secrets = str | Sequence[str]


def generate_secret() -> str:
    """A new signing secret: ``whsec_`` and 32 random bytes in base64.

    Give it to the receiver once, over a channel you trust; koboi stores it with
    the deliveries that use it.
    """
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(_GENERATED_KEY_BYTES)).decode()


def new_message_id() -> str:
    """A new delivery id: ``msg_`` and 26 characters, sortable by creation time.

    48 bits of milliseconds then 80 random bits, in Crockford base32 (the ULID
    layout), so ids listed in key order come out oldest first.
    """
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = [_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5)]
    return "msg_" + "".join(chars)


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret; :class:`WebhookError` when malformed.

    The message never repeats the secret.
    """
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise WebhookError(
            "a webhook secret must look like 'whsec_<base64>'; create one with "
            "koboi_server.webhooks.generate_secret()"
        )
    encoded = secret[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise WebhookError(
            "the part of the webhook secret after 'whsec_' is not valid base64; create one "
            "with koboi_server.webhooks.generate_secret()"
        ) from None
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise WebhookError(
            f"a webhook secret must hold {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes of key, this "
            f"one holds {len(key)}; create one with koboi_server.webhooks.generate_secret()"
        )
    return key


def _secret_list(secret: Secrets) -> list[str]:
    listed = [secret] if isinstance(secret, str) else list(secret)
    if not listed:
        raise WebhookError("give at least one webhook secret")
    return listed


def _signed_content(msg_id: str, timestamp: int, body: bytes) -> bytes:
    return f"{msg_id}.{timestamp}.".encode() + body


def _as_bytes(body: bytes | str) -> bytes:
    return body.encode("utf-8") if isinstance(body, str) else bytes(body)


def sign(secret: str, msg_id: str, timestamp: int, body: bytes | str) -> str:
    """One signature in header form: ``v1,<base64 HMAC-SHA256 of id.timestamp.body>``."""
    digest = hmac.new(
        secret_key(secret), _signed_content(msg_id, timestamp, _as_bytes(body)), hashlib.sha256
    ).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_header(secret: Secrets, msg_id: str, timestamp: int, body: bytes | str) -> str:
    """The ``webhook-signature`` value: one ``v1,<sig>`` per secret, space separated."""
    return " ".join(sign(s, msg_id, timestamp, body) for s in _secret_list(secret))


def webhook_headers(
    secret: Secrets, msg_id: str, timestamp: int, body: bytes | str
) -> dict[str, str]:
    """The three signature headers of one attempt."""
    return {
        HEADER_ID: msg_id,
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_SIGNATURE: signature_header(secret, msg_id, timestamp, body),
    }


def _header(headers: Mapping[str, Any], name: str) -> str:
    for key, value in headers.items():
        if str(key).lower() == name:
            return str(value).strip()
    raise WebhookVerificationError(
        f"the request has no {name} header: it is not a koboi webhook, or a proxy removed it",
        reason="missing_header",
    )


def _candidates(header: str) -> Iterable[bytes]:
    for part in header.split():
        version, _, value = part.partition(",")
        if version != "v1":
            continue  # other schemes (v1a: asymmetric) are not ours to check
        try:
            yield base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue


def verify(
    secret: Secrets,
    headers: Mapping[str, Any],
    body: bytes | str,
    *,
    tolerance: float = 300,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a received webhook and return its JSON payload; raise if it is not authentic.

    :param secret: the ``whsec_...`` secret of this endpoint, or several (accept the
        old and the new one while rotating).
    :param headers: the request headers, any mapping (names are matched without
        regard to case): ``dict``, Starlette's, httpx's, Flask's...
    :param body: the raw request body, exactly as received. Parse JSON *after*
        verifying: a re-serialised body does not verify.
    :param tolerance: seconds the ``webhook-timestamp`` may lie in the past or the
        future. It bounds replays of a captured request; keep a store of seen
        ``webhook-id`` values for at least this long to refuse replays within it
        (and to drop the duplicates at-least-once delivery may produce).
    :param now: the current time in seconds (for tests); ``time.time()`` by default.
    :returns: the decoded body, ``{"type": ..., "timestamp": ..., "data": {...}}``.
    :raises WebhookVerificationError: with ``reason`` ``missing_header``,
        ``bad_timestamp``, ``stale``, ``future``, ``bad_signature`` or ``bad_body``.

    Signatures are compared with :func:`hmac.compare_digest` (constant time).
    """
    keys = [secret_key(s) for s in _secret_list(secret)]
    msg_id = _header(headers, HEADER_ID)
    stamp_text = _header(headers, HEADER_TIMESTAMP)
    signatures = _header(headers, HEADER_SIGNATURE)
    if not stamp_text.isdigit() or len(stamp_text) > 12:
        raise WebhookVerificationError(
            f"the {HEADER_TIMESTAMP} header must be whole seconds since 1970, "
            f"not {stamp_text[:40]!r}",
            reason="bad_timestamp",
        )
    timestamp = int(stamp_text)
    current = time.time() if now is None else now
    if timestamp < current - tolerance:
        raise WebhookVerificationError(
            f"the webhook timestamp is {current - timestamp:.0f} s old, more than the "
            f"tolerance of {tolerance:g} s: a replayed or long-delayed request",
            reason="stale",
        )
    if timestamp > current + tolerance:
        raise WebhookVerificationError(
            f"the webhook timestamp is {timestamp - current:.0f} s in the future, more than "
            f"the tolerance of {tolerance:g} s: check the sender's and this machine's clocks",
            reason="future",
        )
    raw = _as_bytes(body)
    content = _signed_content(msg_id, timestamp, raw)
    expected = [hmac.new(key, content, hashlib.sha256).digest() for key in keys]
    matched = False
    for candidate in _candidates(signatures):
        for digest in expected:
            # No early exit: the time taken does not tell which pair matched.
            matched |= hmac.compare_digest(candidate, digest)
    if not matched:
        raise WebhookVerificationError(
            "no webhook signature matches: the body was changed, or the secret is not the "
            "endpoint's",
            reason="bad_signature",
        )
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise WebhookVerificationError(
            "the webhook is signed but its body is not a JSON object", reason="bad_body"
        )
    return payload
