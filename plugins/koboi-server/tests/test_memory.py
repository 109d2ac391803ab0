"""What a ready ``koboi serve`` replica holds in memory (benchmarks/server/README.md).

A real ``koboi serve`` in a subprocess, started through the CLI as a user
starts it, with a small watcher thread in that process: when the test drops a
request file, the watcher writes down the modules the process has imported and
how often it released free memory. No RSS threshold here (that is the
benchmark's job): these tests lock in *why* the RSS is what it is.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

#: Runs in the server process: the watcher, then ``koboi serve`` via the CLI's main().
DRIVER = """
import gc, json, os, sys, threading, time
from pathlib import Path

import koboi_server.serve as serve  # light: uvicorn, FastAPI and the store load later

releases = []
release = serve.release_free_memory

def counted(**options):
    releases.append(options)
    release(**options)

serve.release_free_memory = counted
serve.QUIET_SECONDS = 1  # a quiet spell of one second, so the test is quick

def watch(folder):
    n = 0
    while True:
        ask = folder / f"ask-{n}"
        if ask.exists():
            snapshot = {
                "modules": sorted(sys.modules),
                "releases": list(releases),
                "frozen": gc.get_freeze_count(),
            }
            tmp = folder / f"tmp-{n}"
            tmp.write_text(json.dumps(snapshot))
            tmp.rename(folder / f"answer-{n}")
            n += 1
        time.sleep(0.02)

threading.Thread(target=watch, args=(Path(sys.argv[1]),), daemon=True).start()
sys.argv = ["koboi", "serve", *sys.argv[2:]]
from koboi_cli.app import main
main()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Replica:
    def __init__(self, config: Path, folder: Path) -> None:
        self.port = free_port()
        self.folder = folder
        self.asked = 0
        self.log = folder / "serve.log"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", DRIVER, str(folder), str(config), "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=config.parent,
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                answer = httpx.get(self.url + "/readyz", timeout=1)
                if answer.status_code == 200:
                    ready: dict[str, Any] = answer.json()
                    return ready
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"not ready in 30 s:\n{self.log.read_text()}")

    def snapshot(self) -> dict[str, Any]:
        (self.folder / f"ask-{self.asked}").touch()
        answer = self.folder / f"answer-{self.asked}"
        self.asked += 1
        deadline = time.monotonic() + 10
        while not answer.exists():
            assert time.monotonic() < deadline, "the watcher did not answer"
            time.sleep(0.02)
        data: dict[str, Any] = json.loads(answer.read_text())
        return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:  # pragma: no cover - a hang is a failure
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def replica(
    write_config: Callable[..., Path], make_key: Callable[..., str], tmp_path: Path
) -> Iterator[tuple[Replica, str]]:
    config = write_config(
        textwrap.dedent(
            """
            agent: {name: idle, mode: act}
            llm:
              provider: scripted
              rules:
                - match: '(?P<expr>\\d+ \\+ \\d+)'
                  tool: calculator
                  arguments: {expression: "{expr}"}
                  reply: "{expr} = {result}"
            tools: {builtin: [calculator]}
            store: {url: "sqlite:///koboi.db"}
            server: {access_log: false}
            """
        )
    )
    key = make_key("alice", config)  # creates the database: the replica finds it current
    folder = tmp_path / "watch"
    folder.mkdir()
    server = Replica(config, folder)
    try:
        yield server, key
    finally:
        server.stop()


def test_a_ready_replica_has_no_alembic_and_releases_free_memory_when_idle(
    replica: tuple[Replica, str],
) -> None:
    """One replica for both checks: each start of a server costs seconds of CI."""
    server, key = replica
    ready = server.wait_ready()
    from koboi_store_sql.migrate import LATEST_REVISION

    # /readyz read the revision: the schema check did run, without alembic.
    assert ready["schema_revision"] == LATEST_REVISION
    first = server.snapshot()
    modules = set(first["modules"])
    # The control: the snapshot is of a serving process with its store open.
    assert {"fastapi", "uvicorn", "sqlalchemy", "koboi_store_sql.store"} <= modules
    # alembic (with mako) only when the schema must change; httpx (with its TLS
    # context) only when a webhook is sent.
    assert {"alembic", "mako", "httpx"}.isdisjoint(modules)
    # Free memory released at startup: collected, and the survivors frozen (they
    # live as long as the process, so later collections skip them).
    assert first["releases"][0] == {"freeze": True}
    assert first["frozen"] > 10_000

    headers = {"Authorization": f"Bearer {key}"}
    for n in range(3):
        answer = httpx.post(
            server.url + "/v1/chat", json={"message": f"{n} + 1"}, headers=headers, timeout=30
        )
        assert answer.status_code == 200 and answer.json()["outcome"] == "completed"
    after = server.snapshot()
    assert {"alembic", "mako"}.isdisjoint(after["modules"])
    seen = len(after["releases"])
    deadline = time.monotonic() + 10
    while (now := len(server.snapshot()["releases"])) == seen:
        assert time.monotonic() < deadline, "no release after the requests stopped"
        time.sleep(0.1)
    assert now == seen + 1
    time.sleep(1.5)  # past the next quiet second, without a request
    assert len(server.snapshot()["releases"]) == now, "one release per quiet spell"
