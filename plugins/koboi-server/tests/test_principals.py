"""One principal only on a sandbox that cannot keep sessions apart (issue 15, item 1).

``passthrough`` shares one working directory between every session, so there one
principal's tools read and write another's files. The server refuses to start with
keys of two principals there, serves only the oldest key's principal while it runs,
and serves everyone when the sandbox isolates sessions or the operator opts in
(``server.shared_sandbox``).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from koboi.errors import KoboiError
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import probe
from koboi_sandbox.restricted import RestrictedSandbox


def _start_fails(config: Path, sandbox: Any = None, **settings: Any) -> str:
    """Run the app's lifespan the way uvicorn does; return the error that stops it."""
    from koboi_server import create_app

    extra = {} if sandbox is None else {"sandbox": sandbox}
    app = create_app(config, settings={"shared_sandbox": False, **settings}, **extra)

    async def start() -> None:
        async with app.router.lifespan_context(app):
            raise AssertionError("the server started")

    with pytest.raises(KoboiError) as refused:
        anyio.run(start)
    return str(refused.value)


def test_two_principals_on_passthrough_refuse_the_start(
    config_path: Path, make_key: Callable[..., str]
) -> None:
    make_key("alice")
    make_key("bob")
    message = _start_fails(config_path)
    assert "would serve 2 principals (alice, bob)" in message
    assert "sandbox 'passthrough' does not keep sessions apart" in message
    assert "server.shared_sandbox: true" in message and "koboi sandbox check" in message


def test_koboi_serve_says_so_in_one_line_before_it_binds(
    config_path: Path, make_key: Callable[..., str]
) -> None:
    make_key("alice")
    make_key("bob")
    proc = subprocess.run(
        [sys.executable, "-m", "koboi_cli", "serve", str(config_path), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=config_path.parent,
        env={**os.environ, "KOBOI_STRICT_PLUGINS": "1"},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "would serve 2 principals (alice, bob)" in errors[0]
    assert "Traceback" not in proc.stderr


def test_while_running_only_the_oldest_keys_principal_is_served(
    config_path: Path,
    make_key: Callable[..., str],
    thread_server: Callable[..., Any],
    in_store: Callable[..., Any],
) -> None:
    alice = make_key("alice")
    server = thread_server(settings={"shared_sandbox": False})
    bob = make_key("bob")  # created after the start: the gate reads the keys again
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        mine = client.get("/v1/sessions", headers={"Authorization": f"Bearer {alice}"})
        theirs = client.get("/v1/sessions", headers={"Authorization": f"Bearer {bob}"})
        chat = client.post(
            "/v1/chat", json={"message": "2 + 2"}, headers={"Authorization": f"Bearer {bob}"}
        )
        again = client.get("/v1/sessions", headers={"Authorization": f"Bearer {alice}"})
    assert mine.status_code == 200 and again.status_code == 200
    for refused in (theirs, chat):
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["code"] == "single_principal"
        assert "serves principal 'alice' only" in error["message"]
    # The refused chat created nothing, for anyone.
    assert in_store(lambda store: store.list_sessions()) == []


def test_the_operator_may_share_the_sandbox(
    config_path: Path,
    make_key: Callable[..., str],
    thread_server: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    alice, bob = make_key("alice"), make_key("bob")
    with caplog.at_level("WARNING", logger="koboi.server"):
        server = thread_server(settings={"shared_sandbox": True})
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        for key in (alice, bob):
            answer = client.get("/v1/sessions", headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 200, answer.text
    assert "server.shared_sandbox is on" in caplog.text
    assert "can read and write the others' files" in caplog.text


def test_a_sandbox_that_isolates_sessions_serves_every_principal(
    config_path: Path,
    make_key: Callable[..., str],
    thread_server: Callable[..., Any],
    tmp_path: Path,
) -> None:
    sandbox = RestrictedSandbox(RestrictedOptions(workdir=str(tmp_path / "sessions")))
    if not sandbox.isolates_sessions:
        assert not os.environ.get("CI"), "CI machines isolate sessions (root or Landlock)"
        pytest.skip("this machine cannot isolate sessions: " + repr(sandbox.describe()))
    alice, bob = make_key("alice"), make_key("bob")
    server = thread_server(settings={"shared_sandbox": False}, sandbox=sandbox)
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        for key in (alice, bob):
            answer = client.get("/v1/sessions", headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 200, answer.text


def test_a_restricted_sandbox_that_cannot_isolate_refuses_several_principals(
    config_path: Path,
    make_key: Callable[..., str],
    thread_server: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """Not only passthrough: ``restricted`` on a machine (or with options) where it cannot
    keep sessions apart says so, and the server then refuses two principals likewise."""
    caps = probe()
    if caps.root:  # as root, user: keep runs every session as root
        options = RestrictedOptions(workdir=str(tmp_path / "sessions"), user="keep")
    else:  # as an ordinary user, without Landlock nothing isolates
        options = RestrictedOptions(workdir=str(tmp_path / "sessions"))
        caps = dataclasses.replace(caps, landlock_abi=0, landlock_reason="off for the test")
    sandbox = RestrictedSandbox(options, capabilities=caps)
    assert not sandbox.isolates_sessions, sandbox.describe()
    alice, bob = make_key("alice"), make_key("bob")
    message = _start_fails(config_path, sandbox=sandbox)
    assert "would serve 2 principals (alice, bob)" in message
    assert "sandbox 'restricted' does not keep sessions apart" in message
    # Positive control: the operator's opt-in serves both on the same sandbox.
    server = thread_server(settings={"shared_sandbox": True}, sandbox=sandbox)
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        for key in (alice, bob):
            answer = client.get("/v1/sessions", headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 200, answer.text
