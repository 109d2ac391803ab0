"""pytest plugin of koboi-testing (loaded through the ``pytest11`` entry point).

It defines fixtures, and imports koboi lazily inside them so that loading the
plugin stays cheap for every pytest run in an environment that has it. It also
turns on ``KOBOI_STRICT_PLUGINS`` for the test session (unless the environment
sets it), so a plugin that fails to load fails the tests instead of being
skipped with a warning.

Fixtures:

``anyio_backend``
    ``"asyncio"``, so ``@pytest.mark.anyio`` tests run once, on asyncio. Override
    it in a ``conftest.py`` to add trio.
``koboi_tool_context``
    A :class:`koboi.tools.ToolContext` whose sandbox is a
    :class:`koboi.sandbox.PassthroughSandbox` rooted at ``tmp_path``.
``koboi_toolset_context``
    A :class:`koboi.toolsets.ToolsetContext` (a passthrough sandbox rooted at
    ``tmp_path``, an in-memory store, a scripted-model config): what
    ``Toolset.open`` is given; ``ToolsetContract`` uses it.
``koboi_clean_environment``
    Strict plugins, and nothing of the caller's shell deciding the store
    (``KOBOI_STORE``), the plugins (``KOBOI_LOAD_PLUGINS``, ``KOBOI_DISABLE_PLUGINS``),
    the cache mode, debug output, colour or a demo's pauses (``KOBOI_DEMO_*``); the
    default plugin host is made anew before and after the test. Use it from an
    autouse fixture in a ``conftest.py``.
``memory_store``
    An opened :class:`koboi.store.InMemoryStore` (async fixture; use it from
    ``@pytest.mark.anyio`` tests).
``koboi_command``
    Runs the real ``koboi`` command in a subprocess of this environment with only
    the plugins a test names: ``koboi_command("run", "agent.yaml", "-m", "hi",
    plugins=["scripted", "weather"])`` returns a :class:`subprocess.CompletedProcess`
    (text). ``plugins=None`` loads every installed plugin. Strict plugin mode is on in
    the subprocess, as in the test process.

Strict plugin mode reaches subprocesses through the environment: this plugin sets
``KOBOI_STRICT_PLUGINS=1`` in ``os.environ`` when pytest starts (unless it is set),
and every process a test starts inherits it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from importlib import util
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# The contract suites live in the installed package, not in a test module, so
# their plain ``assert`` statements are rewritten only if we ask for it before
# they are imported.
pytest.register_assert_rewrite("koboi_testing.contracts")


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("KOBOI_STRICT_PLUGINS", "1")


if TYPE_CHECKING:
    from koboi.store import InMemoryStore
    from koboi.tools import ToolContext
    from koboi.toolsets import ToolsetContext


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Run anyio tests on asyncio only (koboi targets asyncio; trio is opt-in)."""
    return "asyncio"


@pytest.fixture
def koboi_tool_context(tmp_path: Path) -> ToolContext:
    """A tool context with a passthrough sandbox and ``tmp_path`` as the working directory."""
    from koboi.sandbox import PassthroughSandbox
    from koboi.tools import ToolContext

    return ToolContext(
        session_id="test-session",
        call_id="call-1",
        step=1,
        sandbox=PassthroughSandbox(workdir=tmp_path),
        workdir=tmp_path,
    )


@pytest.fixture
def koboi_toolset_context(tmp_path: Path) -> ToolsetContext:
    """What a toolset is opened with: a passthrough sandbox working in ``tmp_path``,
    an in-memory store and the config of an agent with a scripted model."""
    from koboi_testing.contracts.toolset import toolset_context

    return toolset_context({"llm": {"provider": "scripted"}}, tmp_path)


#: What a caller's shell may set that would change which store, plugins, cache mode,
#: debug output or colour a test gets (``KOBOI_DEMO_*`` too: the demo tools' pauses).
CALLER_VARIABLES = (
    "KOBOI_STORE",
    "KOBOI_CACHE_MODE",
    "KOBOI_DEBUG",
    "KOBOI_LOAD_PLUGINS",
    "KOBOI_DISABLE_PLUGINS",
    "NO_COLOR",
)


@pytest.fixture
def koboi_clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Strict plugins; no store, plugin filter, cache mode, debug, colour setting or demo
    pause from the caller's shell; a new default plugin host before and after."""
    from koboi.plugins import reset_default_host

    monkeypatch.setenv("KOBOI_STRICT_PLUGINS", "1")
    for name in list(os.environ):
        if name.startswith("KOBOI_DEMO_") or name in CALLER_VARIABLES:
            monkeypatch.delenv(name, raising=False)
    reset_default_host()
    yield
    reset_default_host()


@pytest.fixture
async def memory_store(anyio_backend: str) -> AsyncIterator[InMemoryStore]:
    """An opened, empty in-memory store, closed after the test."""
    from koboi.store import InMemoryStore

    store = InMemoryStore()
    async with store:
        yield store


class KoboiCommand:
    """The real ``koboi`` command of this environment, run as a subprocess."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(
        self,
        *args: str,
        plugins: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        input: str | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``koboi ARGS...``; ``plugins`` are the ids to load (the built-in one always;
        None: every installed plugin). ``env`` is added last, so it may set
        ``KOBOI_DISABLE_PLUGINS`` or ``KOBOI_LOAD_PLUGINS`` itself; the test process's
        own plugin filters are never inherited."""
        if util.find_spec("koboi_cli") is None:
            raise RuntimeError("koboi_command needs koboi-cli installed in the test environment")
        # The plugin filters come from this call only, never from the test process:
        # ``plugins`` (None: every installed plugin), and what ``env`` says.
        environ = {
            k: v
            for k, v in os.environ.items()
            if k not in ("KOBOI_LOAD_PLUGINS", "KOBOI_DISABLE_PLUGINS")
        }
        environ["KOBOI_STRICT_PLUGINS"] = "1"
        if plugins is not None:
            environ["KOBOI_LOAD_PLUGINS"] = ",".join(plugins)
        environ.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "koboi_cli", *args],
            cwd=cwd or self.cwd,
            env=environ,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture
def koboi_command(tmp_path: Path) -> KoboiCommand:
    """Run the real ``koboi`` command with only the plugins a test names (see the module doc)."""
    return KoboiCommand(tmp_path)
