"""Fixtures: tool contexts over real sandboxes (passthrough and restricted) on this machine."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi.sandbox import PassthroughSandbox, Sandbox
from koboi.tools import Tool, ToolContext, ToolResult
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.restricted import RestrictedSandbox
from koboi_tools_shell.jobs import JobRegistry

ContextMaker = Callable[..., ToolContext]

# Test modules cannot import this file under --import-mode=importlib: what they
# need is here as fixtures.


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user can traverse: the restricted sandbox's user is nobody when root."""
    path = Path(tempfile.mkdtemp(prefix="koboi-shell-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def registry() -> Iterator[JobRegistry]:
    """A job registry of the test's own; every job it still runs is killed afterwards."""
    jobs = JobRegistry()
    yield jobs
    jobs.shutdown()


def make_sandbox(kind: str, root: Path, **options: Any) -> Sandbox:
    if kind == "passthrough":
        root.mkdir(parents=True, exist_ok=True)
        return PassthroughSandbox(root)
    settings: dict[str, Any] = {"workdir": str(root), **options}
    if kind == "hard":
        settings["isolation"] = "hard"
    return RestrictedSandbox(RestrictedOptions.model_validate(settings))


@pytest.fixture(params=["passthrough", "restricted"])
def sandbox_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_sandbox_at() -> Callable[..., Sandbox]:
    """``make_sandbox_at(kind, root, **options)`` with kind passthrough, restricted or hard."""
    return make_sandbox


@pytest.fixture
def make_context(open_dir: Path) -> ContextMaker:
    """``make_context(kind, session_id="s1")``: a context as the agent loop builds it."""
    sandboxes: dict[str, Sandbox] = {}

    def make(kind: str = "passthrough", session_id: str = "s1") -> ToolContext:
        if kind not in sandboxes:
            sandboxes[kind] = make_sandbox(kind, open_dir / kind)
        sandbox = sandboxes[kind]
        return ToolContext(
            session_id=session_id,
            call_id="call-1",
            step=1,
            sandbox=sandbox,
            workdir=sandbox.workdir_for(session_id),
        )

    return make


async def _call(tool: Tool, ctx: ToolContext, **arguments: Any) -> ToolResult:
    """Validate and run ``tool`` as the sandbox would."""
    return await ctx.sandbox.run_tool(tool, tool.parse_arguments(arguments), ctx)


async def _wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():  # noqa: ASYNC110 - polls state another thread or process changes
            await anyio.sleep(0.05)


async def _never_appears(path: Path, seconds: float) -> bool:
    """True if ``path`` does not exist at any point over the next ``seconds``."""
    deadline = time.monotonic() + seconds
    target = anyio.Path(path)
    while time.monotonic() < deadline:
        if await target.exists():
            return False
        await anyio.sleep(0.05)
    return not await target.exists()


@pytest.fixture
def call() -> Callable[..., Any]:
    """``await call(tool, ctx, **arguments)``: validate and run through the context's sandbox."""
    return _call


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    """``await wait_until(predicate, timeout=10)``."""
    return _wait_until


@pytest.fixture
def never_appears() -> Callable[..., Any]:
    """``await never_appears(path, seconds)``: True if ``path`` stays absent that long."""
    return _never_appears
