"""A plugin host holding this plugin and the scripted model; agents built from a hooks section.

The hook scripts under ``tests/scripts`` are written for the shared command-hook
contract (bash and Python, no koboi import): the tests run them unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import koboi_hooks.plugin
import koboi_scripted.plugin
from koboi import AllowAllApprover, KoboiAgent, PluginHost, ToolContext, tool
from koboi.plugins import use_host
from koboi.store import InMemoryStore, JournalEvent
from koboi_testing.models import InOrderModel

SCRIPTS = Path(__file__).parent / "scripts"


def script(name: str) -> list[str]:
    """The argv of a contract script (its interpreter named, so no exec bit is needed)."""
    path = str(SCRIPTS / name)
    return ["/bin/bash", path] if name.endswith(".sh") else ["/usr/bin/python3", path]


@pytest.fixture
def host() -> Iterator[PluginHost]:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(koboi_hooks.plugin, "hooks", dist="koboi-hooks")
    with use_host(host):
        yield host


class Ran:
    """What the test tools were called with (the proof a refused call never ran)."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.writes: list[tuple[str, str]] = []


@pytest.fixture
def ran() -> Ran:
    return Ran()


def tools_for(ran: Ran) -> list[Any]:
    @tool(name="run_shell", risk="safe", idempotent=False, thread=False)
    def run_shell(command: str) -> str:
        """Run a shell command (recorded, not run).

        Args:
            command: The command line.
        """
        ran.commands.append(command)
        return f"ran: {command}"

    @tool(name="write_file", risk="safe", idempotent=False, thread=False)
    def write_file(path: str, content: str, ctx: ToolContext) -> str:
        """Write a file (recorded, not written).

        Args:
            path: Where, relative to the working directory.
            content: What.
        """
        ran.writes.append((path, content))
        return f"wrote {len(content)} characters to {path}"

    return [run_shell, write_file]


def make_agent(
    hooks: dict[str, Any],
    turns: Sequence[Any],
    ran: Ran,
    tmp_path: Path,
    *,
    store: InMemoryStore | None = None,
    extra: dict[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[KoboiAgent, InOrderModel]:
    model = InOrderModel(list(turns))
    config = {
        "llm": {"provider": "scripted"},
        "agent": {"stream": False},
        "sandbox": {"backend": "passthrough", "workdir": str(tmp_path / "work")},
        "hooks": hooks,
        **(extra or {}),
    }
    (tmp_path / "work").mkdir(exist_ok=True)
    kwargs.setdefault("approver", AllowAllApprover())
    agent = KoboiAgent.from_dict(
        config,
        base_dir=tmp_path,
        provider=model,
        store=store or InMemoryStore(),
        extra_tools=tools_for(ran),
        **kwargs,
    )
    return agent, model


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def hook_events(events: Sequence[JournalEvent]) -> list[dict[str, Any]]:
    return [dict(e.data) for e in events if e.type == "hooks.ran"]


class Kit:
    """The helpers above, for test modules (pytest's importlib mode keeps conftest private)."""

    script = staticmethod(script)
    call = staticmethod(call)
    hook_events = staticmethod(hook_events)
    make_agent = staticmethod(make_agent)
    tools_for = staticmethod(tools_for)


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
