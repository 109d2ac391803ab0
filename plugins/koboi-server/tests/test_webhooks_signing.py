"""Signatures on their own: secrets, ids, the header format, and every way verify() refuses.

Each refusal has its control: the same request, untouched, verifies. Deliveries
signed by a real dispatcher and checked by a real receiver are in
test_webhooks_delivery.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koboi.errors import KoboiError
from koboi_server.webhooks import (
    WebhookError,
    WebhookVerificationError,
    generate_secret,
    new_message_id,
    sign,
    signature_header,
    verify,
    webhook_headers,
)

NOW = 1_718_000_000
BODY = b'{"type":"job.finished","timestamp":"2024-06-10T06:13:20.000Z","data":{"job":"j1"}}'


def signed(secret: str | list[str], body: bytes = BODY, *, at: int = NOW) -> dict[str, str]:
    return webhook_headers(secret, "msg_test", at, body)


# -- secrets and ids -------------------------------------------------------------


def test_generated_secrets_are_whsec_base64_of_32_random_bytes() -> None:
    made = {generate_secret() for _ in range(50)}
    assert len(made) == 50
    for secret in made:
        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret[6:], validate=True)) == 32


def test_message_ids_are_unique_header_safe_and_sort_by_creation() -> None:
    ids = [new_message_id() for _ in range(200)]
    assert len(set(ids)) == 200
    assert all(re.fullmatch(r"msg_[0-9A-HJKMNP-TV-Z]{26}", i) for i in ids)
    # Same millisecond ids may come in any order; across milliseconds the prefix sorts.
    assert [i[:14] for i in ids] == sorted(i[:14] for i in ids)


def test_the_signature_is_hmac_sha256_of_id_timestamp_body_in_base64() -> None:
    secret = generate_secret()
    key = base64.b64decode(secret[6:])
    expected = base64.b64encode(
        hmac.new(key, b"msg_test.%d." % NOW + BODY, hashlib.sha256).digest()
    ).decode()
    assert sign(secret, "msg_test", NOW, BODY) == f"v1,{expected}"
    assert signed(secret) == {
        "webhook-id": "msg_test",
        "webhook-timestamp": str(NOW),
        "webhook-signature": f"v1,{expected}",
    }


@pytest.mark.parametrize(
    ("secret", "complaint"),
    [
        ("not-a-secret", "whsec_<base64>"),
        ("whsec_***not base64***", "not valid base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "holds 5"),
        ("", "whsec_<base64>"),
    ],
)
def test_a_malformed_secret_is_refused_without_repeating_it(secret: str, complaint: str) -> None:
    with pytest.raises(WebhookError, match=re.escape(complaint)) as caught:
        sign(secret, "msg_test", NOW, BODY)
    assert isinstance(caught.value, KoboiError)
    assert "generate_secret()" in str(caught.value)
    if secret:
        assert secret not in str(caught.value)
    # Control: a proper secret signs.
    assert sign(generate_secret(), "msg_test", NOW, BODY).startswith("v1,")


# -- verify: the control and each refusal ---------------------------------------------


def test_verify_returns_the_payload_of_an_authentic_request() -> None:
    secret = generate_secret()
    event = verify(secret, signed(secret), BODY, now=NOW)
    assert event == json.loads(BODY)


def test_header_names_are_matched_without_regard_to_case() -> None:
    secret = generate_secret()
    headers = {k.title(): v for k, v in signed(secret).items()}
    assert verify(secret, headers, BODY.decode(), now=NOW)["data"] == {"job": "j1"}


def test_a_tampered_body_fails() -> None:
    secret = generate_secret()
    headers = signed(secret)
    tampered = BODY.replace(b"j1", b"j2")
    with pytest.raises(WebhookVerificationError, match="no webhook signature matches") as caught:
        verify(secret, headers, tampered, now=NOW)
    assert caught.value.reason == "bad_signature"
    assert verify(secret, headers, BODY, now=NOW)  # control


def test_another_secret_fails() -> None:
    secret, other = generate_secret(), generate_secret()
    with pytest.raises(WebhookVerificationError) as caught:
        verify(other, signed(secret), BODY, now=NOW)
    assert caught.value.reason == "bad_signature"


def test_a_changed_id_or_timestamp_fails() -> None:
    secret = generate_secret()
    for name, value in (("webhook-id", "msg_other"), ("webhook-timestamp", str(NOW + 1))):
        headers = {**signed(secret), name: value}
        with pytest.raises(WebhookVerificationError) as caught:
            verify(secret, headers, BODY, now=NOW)
        assert caught.value.reason == "bad_signature"


@pytest.mark.parametrize(
    ("offset", "reason"), [(301, "stale"), (-301, "future"), (86_400, "stale")]
)
def test_a_timestamp_outside_the_tolerance_fails(offset: int, reason: str) -> None:
    secret = generate_secret()
    headers = signed(secret)
    with pytest.raises(WebhookVerificationError) as caught:
        verify(secret, headers, BODY, now=NOW + offset)
    assert caught.value.reason == reason
    # Control: just inside the tolerance, and a wider tolerance, both pass.
    assert verify(secret, headers, BODY, now=NOW + (299 if offset > 0 else -299))
    assert verify(secret, headers, BODY, now=NOW + offset, tolerance=abs(offset) + 1)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_fails_naming_it(missing: str) -> None:
    secret = generate_secret()
    headers = {k: v for k, v in signed(secret).items() if k != missing}
    with pytest.raises(WebhookVerificationError, match=f"no {missing} header") as caught:
        verify(secret, headers, BODY, now=NOW)
    assert caught.value.reason == "missing_header"


@pytest.mark.parametrize("stamp", ["", "soon", "1718000000.5", "-5", "9" * 30])
def test_a_malformed_timestamp_fails(stamp: str) -> None:
    secret = generate_secret()
    headers = {**signed(secret), "webhook-timestamp": stamp}
    with pytest.raises(WebhookVerificationError) as caught:
        verify(secret, headers, BODY, now=NOW)
    assert caught.value.reason == "bad_timestamp"


@pytest.mark.parametrize("header", ["", "v1", "v1,", "v1,%%%", "v2,{sig}", "{sig}", "v1a,{sig}"])
def test_malformed_or_foreign_signature_entries_fail(header: str) -> None:
    secret = generate_secret()
    good = signed(secret)
    sig = good["webhook-signature"].removeprefix("v1,")
    headers = {**good, "webhook-signature": header.format(sig=sig)}
    with pytest.raises(WebhookVerificationError) as caught:
        verify(secret, headers, BODY, now=NOW)
    assert caught.value.reason == "bad_signature"


def test_a_signed_body_that_is_not_a_json_object_fails() -> None:
    secret = generate_secret()
    for body in (b"[1, 2]", b"not json"):
        with pytest.raises(WebhookVerificationError) as caught:
            verify(secret, signed(secret, body), body, now=NOW)
        assert caught.value.reason == "bad_body"


# -- rotation ----------------------------------------------------------------------------


def test_rotation_signs_with_every_secret_and_either_verifies() -> None:
    old, new, stranger = generate_secret(), generate_secret(), generate_secret()
    headers = signed([new, old])
    parts = headers["webhook-signature"].split(" ")
    assert parts == [sign(new, "msg_test", NOW, BODY), sign(old, "msg_test", NOW, BODY)]
    assert verify(old, headers, BODY, now=NOW)
    assert verify(new, headers, BODY, now=NOW)
    assert verify([stranger, new], headers, BODY, now=NOW)  # a receiver mid-rotation
    with pytest.raises(WebhookVerificationError):
        verify(stranger, headers, BODY, now=NOW)


def test_signature_header_needs_a_secret() -> None:
    with pytest.raises(WebhookError, match="at least one"):
        signature_header([], "msg_test", NOW, BODY)


# -- properties ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    payload=st.dictionaries(st.text(max_size=8), st.text(max_size=30), max_size=4),
    flip=st.integers(min_value=0),
    stamp=st.integers(min_value=0, max_value=4_000_000_000),
)
def test_any_signed_body_verifies_and_any_one_byte_change_does_not(
    payload: dict[str, str], flip: int, stamp: int
) -> None:
    secret = generate_secret()
    body = json.dumps({"type": "t", "data": payload}, ensure_ascii=False).encode()
    headers = webhook_headers(secret, "msg_p", stamp, body)
    assert verify(secret, headers, body, now=stamp)["data"] == payload
    index = flip % len(body)
    changed = body[:index] + bytes([body[index] ^ 0x01]) + body[index + 1 :]
    with pytest.raises(WebhookVerificationError):
        verify(secret, headers, changed, now=stamp)
