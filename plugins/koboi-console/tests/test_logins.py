"""Console logins on a store (no server): kept by hash, found by token, ended by logout or
expiry; where a form may send the browser afterwards."""

from __future__ import annotations

import hashlib
import json
import time

import anyio
import pytest

from koboi.store import InMemoryStore
from koboi_console.logins import KIND, Logins
from koboi_console.routes import _safe_next
from koboi_server.keys import Principal


def test_a_login_is_kept_by_hash_and_ends_with_logout_or_expiry() -> None:
    async def main() -> None:
        store = InMemoryStore()
        logins = Logins(store, lifetime_seconds=60)
        token, login = await logins.open(Principal("alice", "0123456789abcdef"))
        assert len(token) == 43 and login.csrf != token and len(login.csrf) == 43
        stored = await store.record_list(KIND)
        assert [key for key, _ in stored] == [hashlib.sha256(token.encode()).hexdigest()]
        assert token not in json.dumps(stored)
        found = await logins.find(token)
        assert found is not None and (found.principal, found.key_id) == (
            "alice",
            "0123456789abcdef",
        )
        assert 55 < found.expires_at - time.time() <= 60
        # Anything but the token itself: no login.
        for wrong in (None, "", token[:-1], token + "x", "a" * 43, "../" + token[3:]):
            assert await logins.find(wrong) is None
        await logins.close(token)
        assert await logins.find(token) is None

        short = Logins(store, lifetime_seconds=0.05)
        token, _ = await short.open(Principal("bob", "fedcba9876543210"))
        await anyio.sleep(0.1)
        assert await short.find(token) is None
        with pytest.raises(ValueError, match="API key"):
            await short.open(Principal("dev", None))

    anyio.run(main)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/console/jobs/job_1", "/console/jobs/job_1"),
        ("/console/sessions?status=failed", "/console/sessions?status=failed"),
        (None, "/console/sessions"),
        ("", "/console/sessions"),
        ("https://evil.example/console/", "/console/sessions"),
        ("//evil.example/console/", "/console/sessions"),
        ("/console//evil.example", "/console/sessions"),
        ("/console/\\evil.example", "/console/sessions"),
        ("/console/../v1/sessions", "/console/sessions"),
        ("/console/x\r\nSet-Cookie: a=b", "/console/sessions"),
        ("/v1/sessions", "/console/sessions"),
        ("/consolex/", "/console/sessions"),
    ],
)
def test_a_form_sends_the_browser_back_to_a_console_page_only(
    target: str | None, expected: str
) -> None:
    assert _safe_next(target) == expected
