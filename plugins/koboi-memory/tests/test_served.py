"""Two principals through a real ``koboi serve``: each stores a fact; neither recalls the
other's, by the tool or proactively, and each recalls their own (the positive control)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytestmark = pytest.mark.slow

CONFIG = """
agent: {name: helper, mode: act}
llm:
  provider: scripted
  rules:
    - match: '^remember (?P<fact>.+)'
      tool: memory_store
      arguments: {text: "{fact}"}
      reply: "{result}"
    - match: '^recall (?P<topic>.+)'
      tool: memory_recall
      arguments: {query: "{topic}"}
      reply: "{result}"
  fallback: "I see."
tools: {builtin: [memory_store, memory_recall]}
memory:
  proactive: {enabled: true, recall: true, core_block: true}
server: {shared_sandbox: true}
store: {url: "sqlite:///koboi.db"}
"""


def _store_call(config: Path, work: Any) -> Any:
    from koboi.config import build_store, load_config, resolve_store_url
    from koboi.plugins import default_host

    loaded = load_config(config, default_host().catalog())

    async def main() -> Any:
        catalog = default_host().catalog()
        store = build_store(resolve_store_url(loaded, catalog), loaded.base_dir, catalog)
        async with store:
            return await work(store)

    return anyio.run(main)


def _key(config: Path, principal: str) -> str:
    from koboi_server import KeyRing

    async def create(store: Any) -> str:
        _, token = await KeyRing(store).create(principal)
        return token

    return str(_store_call(config, create))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    config = tmp_path / "agent.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "koboi_cli", "serve", str(config), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env={**os.environ, "KOBOI_STRICT_PLUGINS": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        # Keys first: the server reads them from the store it shares with us.
        yield config, url
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def _wait(url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("koboi serve did not start:\n" + log.read_text())


def test_two_principals_never_recall_each_others_facts(served: tuple[Path, str]) -> None:
    config, url = served
    alice_key, bob_key = _key(config, "alice"), _key(config, "bob")
    _wait(url, config.parent / "serve.log")

    def chat(key: str, message: str) -> dict[str, Any]:
        answer = httpx.post(
            url + "/v1/chat",
            json={"message": message},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        assert body["outcome"] == "completed", body
        return body

    assert "remembered" in chat(alice_key, "remember my locker code is 4711")["output"]
    assert "remembered" in chat(bob_key, "remember my bike is the blue one")["output"]
    # The tool: each finds their own fact (the control), never the other's.
    assert "my locker code is 4711" in chat(alice_key, "recall locker code")["output"]
    assert chat(bob_key, "recall locker code")["output"] == "nothing remembered matches"
    assert "my bike is the blue one" in chat(bob_key, "recall bike")["output"]
    assert chat(alice_key, "recall bike")["output"] == "nothing remembered matches"
    # Proactive recall before the model call: the same, read from the journal.
    alice_asks = chat(alice_key, "what was my locker code again")
    bob_asks = chat(bob_key, "what was my locker code again")

    async def recalled(store: Any, session: str) -> list[str]:
        events = await store.read(session)
        return [f["text"] for e in events if e.type == "memory.recalled" for f in e.data["facts"]]

    assert _store_call(config, lambda s: recalled(s, alice_asks["session_id"])) == [
        "my locker code is 4711"
    ]
    assert _store_call(config, lambda s: recalled(s, bob_asks["session_id"])) == []

    async def sent(store: Any, session: str) -> str:
        return str([e.data for e in await store.read(session) if e.type == "model_call_started"])

    assert "4711" in _store_call(config, lambda s: sent(s, alice_asks["session_id"]))
    assert "4711" not in _store_call(config, lambda s: sent(s, bob_asks["session_id"]))
