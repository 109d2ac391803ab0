"""API keys: the key ring, the ``koboi keys`` commands, and revocation that ends open streams."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi.errors import KoboiError
from koboi.store import InMemoryStore
from koboi_server import KeyRing
from koboi_server.keys import KIND


def test_keys_are_stored_hashed_and_verified() -> None:
    async def main() -> None:
        store = InMemoryStore()
        ring = KeyRing(store)
        key, token = await ring.create("alice", name="laptop")
        assert token.startswith(f"koboi_{key.key_id}_") and len(token) == 6 + 16 + 1 + 43
        stored = await store.record_get(KIND, key.key_id)
        assert stored is not None
        assert token not in json.dumps(stored)  # only the hash is kept
        assert stored["hash"] == hashlib.sha256(token.encode()).hexdigest()
        principal = await ring.verify(token)
        assert principal is not None and principal.name == "alice"
        assert principal.key_id == key.key_id
        # One character off, another key's id with this secret, garbage: all refused.
        assert await ring.verify(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
        _, other = await ring.create("bob")
        assert await ring.verify(other[:23] + token[23:]) is None
        assert await ring.verify("") is None and await ring.verify("koboi_") is None
        assert [k.principal for k in await ring.list()] == ["alice", "bob"]
        revoked = await ring.revoke(key.key_id)
        assert revoked.revoked and await ring.verify(token) is None
        assert (await ring.verify(other)) is not None  # the other key still works
        with pytest.raises(KoboiError, match="no key"):
            await ring.revoke("0123456789abcdef")
        with pytest.raises(KoboiError, match="not a key id"):
            await ring.revoke("alice")
        with pytest.raises(KoboiError, match="not a valid name"):
            await ring.create("alice smith")

    anyio.run(main)


def test_a_key_is_active_by_its_id_until_it_is_revoked() -> None:
    """``KeyRing.active(key_id)``: what a login kept by key id (the web console) checks."""

    async def main() -> None:
        ring = KeyRing(InMemoryStore())
        key, _ = await ring.create("alice")
        principal = await ring.active(key.key_id)
        assert principal is not None and (principal.name, principal.key_id) == (
            "alice",
            key.key_id,
        )
        for wrong in ("0123456789abcdef", f"koboi_{key.key_id}", key.key_id.upper(), "", "x"):
            assert await ring.active(wrong) is None
        await ring.revoke(key.key_id)
        assert await ring.active(key.key_id) is None

    anyio.run(main)


def _koboi(*args: str) -> Any:
    """The ``koboi`` command in this process (the plugin's commands load as in a shell)."""
    from typer.testing import CliRunner

    from koboi_cli.app import app

    return CliRunner().invoke(app, list(args))


def test_the_keys_commands(
    config_path: Path, thread_server: Any, client: Any, write_config: Callable[..., Path]
) -> None:
    # Once through a real process: what a shell user runs.
    command = ["keys", "create", "--config", str(config_path), "--principal", "ops"]
    created = subprocess.run(
        [sys.executable, "-m", "koboi_cli", *command, "--name", "ci"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("koboi_") and "not shown again" in created.stderr
    key_id = token.split("_")[1]

    listed = _koboi("keys", "list", "--config", str(config_path), "--json")
    rows = json.loads(listed.stdout)
    assert [(r["key_id"], r["principal"], r["name"], r["revoked_at"]) for r in rows] == [
        (key_id, "ops", "ci", None)
    ]
    assert token not in listed.stdout

    server = thread_server()
    assert client(server.base_url, token).get("/v1/sessions").status_code == 200

    revoked = _koboi("keys", "revoke", key_id, "--config", str(config_path))
    assert revoked.exit_code == 0 and key_id in revoked.stdout
    assert client(server.base_url, token).get("/v1/sessions").status_code == 401
    assert "revoked" in _koboi("keys", "list", "--config", str(config_path)).stdout

    # Mistakes are one clear line, no traceback.
    bad = _koboi("keys", "create", "--config", str(config_path), "--principal", "no spaces")
    assert bad.exit_code != 0 and "not a valid name" in bad.stderr
    assert "Traceback" not in bad.stderr
    memory = write_config(
        (config_path.read_text()).replace("sqlite:///koboi.db", "memory://"), name="mem.yaml"
    )
    refused = _koboi("keys", "create", "--config", str(memory))
    assert refused.exit_code != 0 and "durable store" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_revoking_a_key_ends_its_open_streams(
    thread_server: Any, client: Any, make_key: Any, revoke_key: Any, sse: Any
) -> None:
    server = thread_server(settings={"key_recheck_seconds": 0.3, "keepalive_seconds": 0.2})
    revoked, kept = make_key("alice"), make_key("alice")
    waiting = client(server.base_url, kept).post("/v1/chat", json={"message": "log hold"}).json()
    sid = waiting["session_id"]
    endings: dict[str, Any] = {}

    def follow(name: str, key: str, seconds: float) -> None:
        with client(server.base_url, key).stream(
            "GET", f"/v1/sessions/{sid}/events", params={"after": waiting["last_event_id"]}
        ) as response:
            assert response.status_code == 200
            stop = time.monotonic() + seconds
            for item in sse(response):
                if not isinstance(item, str) and item.event in ("error", "final", "idle"):
                    endings[name] = (item.event, item.data, time.monotonic())
                    return
                if time.monotonic() > stop:
                    endings[name] = ("still open", None, time.monotonic())
                    return

    threads = [
        threading.Thread(target=follow, args=("revoked", revoked, 6.0)),
        threading.Thread(target=follow, args=("kept", kept, 2.5)),
    ]
    for t in threads:
        t.start()
    time.sleep(0.5)
    revoke_key(revoked)
    at = time.monotonic()
    for t in threads:
        t.join(15)
    event, data, when = endings["revoked"]
    assert event == "error" and data["code"] == "unauthorized"
    assert when - at < 2.0
    assert endings["kept"][0] == "still open"  # positive control: the other key's stream
