"""The plugin as users meet it: entry point, registrations, the config section, an agent."""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pluggy
import pytest

from koboi import AllowAllApprover, KoboiAgent
from koboi.config import validate_config
from koboi.errors import ConfigError
from koboi.store import InMemoryStore
from koboi.tools import Tool
from koboi_tools_shell import plugin
from koboi_tools_shell.settings import ShellSettings, settings_from
from koboi_tools_shell.tools import RunShell, ShellKill, ShellStatus


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "tools-shell"]
    assert ep.value == "koboi_tools_shell.plugin"


def _host() -> pluggy.PluginManager:
    from koboi import hookspecs

    pm = pluggy.PluginManager("koboi")
    pm.add_hookspecs(hookspecs)
    pm.register(plugin)
    return pm


def test_registers_three_tool_factories_and_a_section() -> None:
    tools: dict[str, Any] = {}
    _host().hook.koboi_register_tools(
        register=lambda name, factory, **kw: tools.setdefault(name, factory)
    )
    assert sorted(tools) == ["run_shell", "shell_kill", "shell_status"]
    made = {name: factory(None) for name, factory in tools.items()}
    assert all(isinstance(t, Tool) and t.name == name for name, t in made.items())
    assert isinstance(made["run_shell"], RunShell)
    assert isinstance(made["shell_status"], ShellStatus)
    assert isinstance(made["shell_kill"], ShellKill)
    sections: dict[str, Any] = {}
    _host().hook.koboi_register_config_sections(
        register=lambda name, model, **kw: sections.setdefault(name, model)
    )
    assert sections == {"tools_shell": ShellSettings}


def _config(workdir: Path, command: str, **extra: Any) -> dict[str, Any]:
    return {
        "llm": {
            "provider": "scripted",
            "script": [
                {"tool_calls": [{"name": "run_shell", "arguments": {"command": command}}]},
                "done",
            ],
        },
        "tools": {"builtin": ["run_shell", "shell_status", "shell_kill"]},
        "sandbox": {"backend": "restricted", "workdir": str(workdir)},
        **extra,
    }


def test_the_section_is_validated(open_dir: Path) -> None:
    config = validate_config(
        _config(open_dir, "true", tools_shell={"max_output_bytes": 2048, "max_background_jobs": 1})
    )
    settings = settings_from(config)
    assert settings.max_output_bytes == 2048 and settings.max_background_jobs == 1
    with pytest.raises(ConfigError, match=r"tools_shell\.max_output: unknown key"):
        validate_config(_config(open_dir, "true", tools_shell={"max_output": 1}))
    with pytest.raises(ConfigError, match="larger than max_timeout_seconds"):
        validate_config(
            _config(
                open_dir,
                "true",
                tools_shell={"default_timeout_seconds": 90, "max_timeout_seconds": 30},
            )
        )


def test_a_foreground_timeout_stays_within_the_tool_call_limit(open_dir: Path) -> None:
    config = validate_config(_config(open_dir, "true", tools={"timeout_seconds": 20}))
    settings = settings_from(config)
    assert settings.max_timeout_seconds == 20
    assert settings.default_timeout_seconds == 20
    assert settings.background_timeout_seconds == 600  # jobs outlive the call: not bounded by it


@pytest.mark.anyio
@pytest.mark.e2e
async def test_an_agent_runs_the_shell_as_the_sessions_user_in_its_directory(
    open_dir: Path,
) -> None:
    async with KoboiAgent.from_dict(
        _config(open_dir / "wd", "id -u; pwd"), approver=AllowAllApprover(), store=InMemoryStore()
    ) as agent:
        result = await agent.run("who and where?", session_id="sess-1")
    tool_message = next(m for m in result.messages if m.role == "tool")
    content = tool_message.content
    assert content.startswith("exit_code: 0\n"), content
    stdout = content.split("--- stdout ---\n", 1)[1].split("\n--- stderr ---", 1)[0]
    user, where = stdout.split("\n")
    workdir = (open_dir / "wd" / "sess-1").resolve()
    assert where == str(workdir)
    assert int(user) == workdir.stat().st_uid
    if os.geteuid() == 0:
        assert int(user) != 0


@pytest.mark.anyio
@pytest.mark.e2e
async def test_an_agent_applies_the_tools_shell_section(open_dir: Path) -> None:
    config = _config(
        open_dir / "wd",
        "head -c 5000 /dev/zero | tr '\\0' x",
        tools_shell={"max_output_bytes": 1024},
    )
    async with KoboiAgent.from_dict(
        config, approver=AllowAllApprover(), store=InMemoryStore()
    ) as agent:
        assert "cut after 1024 bytes" in agent.tools["run_shell"].description
        result = await agent.run("flood", session_id="sess-2")
    content = next(m for m in result.messages if m.role == "tool").content
    assert "truncated: true" in content
    assert "[output truncated: 3976 bytes dropped]" in content
