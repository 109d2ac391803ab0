"""The fixtures the koboi pytest plugin provides."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from koboi.sandbox import PassthroughSandbox
from koboi.store import InMemoryStore, NewEvent
from koboi.tools import ToolContext


def test_anyio_backend_is_asyncio(anyio_backend: str) -> None:
    assert anyio_backend == "asyncio"


def test_tool_context_uses_a_passthrough_sandbox_in_tmp_path(
    koboi_tool_context: ToolContext, tmp_path: Path
) -> None:
    assert koboi_tool_context.workdir == tmp_path
    assert isinstance(koboi_tool_context.sandbox, PassthroughSandbox)
    assert koboi_tool_context.sandbox.workdir == tmp_path
    assert koboi_tool_context.session_id
    assert koboi_tool_context.call_id


@pytest.mark.anyio
async def test_tool_context_sandbox_runs_in_tmp_path(
    koboi_tool_context: ToolContext, tmp_path: Path
) -> None:
    result = await koboi_tool_context.sandbox.run_process(["pwd"], timeout=20)
    # Path.resolve() only reads symlinks here; blocking is irrelevant in a test.
    assert Path(result.stdout.strip()).resolve() == tmp_path.resolve()  # noqa: ASYNC240


@pytest.mark.anyio
async def test_memory_store_is_open_and_empty(memory_store: InMemoryStore) -> None:
    assert isinstance(memory_store, InMemoryStore)
    assert await memory_store.list_sessions() == []
    session = await memory_store.create_session("s1")
    assert [e.seq for e in await memory_store.append(session.id, [NewEvent("x")])] == [1]


def test_koboi_command_runs_the_real_command_with_only_the_named_plugins(
    koboi_command: Any,
) -> None:
    some = koboi_command("plugins", "list", "--json", plugins=["scripted"])
    assert some.returncode == 0, some.stderr
    statuses = {p["id"]: p["status"] for p in json.loads(some.stdout)}
    assert statuses["builtin"] == "loaded" and statuses["scripted"] == "loaded"
    assert all(s == "disabled" for pid, s in statuses.items() if pid not in ("builtin", "scripted"))
    failing = koboi_command("run", "missing.yaml", "-m", "hi", plugins=[])
    assert failing.returncode == 1 and "file not found" in failing.stderr


def test_koboi_command_takes_plugin_filters_from_the_call_not_the_test_process(
    koboi_command: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KOBOI_LOAD_PLUGINS", "scripted")  # the test process's own filter
    every = koboi_command("plugins", "list", "--json")  # plugins=None: every plugin
    statuses = {p["id"]: p["status"] for p in json.loads(every.stdout)}
    assert not any(s == "disabled" for s in statuses.values()), statuses
    # A filter given through env= is kept.
    denied = koboi_command("plugins", "list", "--json", env={"KOBOI_DISABLE_PLUGINS": "scripted"})
    statuses = {p["id"]: p["status"] for p in json.loads(denied.stdout)}
    assert statuses["scripted"] == "disabled"


def test_koboi_clean_environment_removes_what_the_callers_shell_set(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    from koboi.plugins import default_host

    for name in ("KOBOI_STORE", "KOBOI_DISABLE_PLUGINS", "KOBOI_DEMO_STEP_SECONDS", "NO_COLOR"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("KOBOI_STRICT_PLUGINS", "0")
    monkeypatch.setenv("KOBOI_UNRELATED_SETTING", "kept")
    before = default_host()
    request.getfixturevalue("koboi_clean_environment")
    assert os.environ["KOBOI_STRICT_PLUGINS"] == "1"
    for name in ("KOBOI_STORE", "KOBOI_DISABLE_PLUGINS", "KOBOI_DEMO_STEP_SECONDS", "NO_COLOR"):
        assert name not in os.environ
    assert os.environ["KOBOI_UNRELATED_SETTING"] == "kept"
    assert default_host() is not before  # a new host, built from the clean environment
