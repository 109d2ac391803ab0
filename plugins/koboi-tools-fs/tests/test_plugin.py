"""The plugin as the kernel sees it: entry point, registrations, config section, an agent run."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

import koboi_scripted.plugin
import koboi_tools_fs.plugin
from koboi import AllowAllApprover, ConfigError, KoboiAgent, PluginHost, validate_config
from koboi.tools import Tool
from koboi_tools_fs.config import FsSettings
from koboi_tools_fs.tools import TOOL_NAMES


@pytest.fixture
def host() -> PluginHost:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(koboi_tools_fs.plugin, "tools-fs", dist="koboi-tools-fs")
    return host


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user can traverse (the restricted sandbox's user must reach it)."""
    path = Path(tempfile.mkdtemp(prefix="koboi-tools-fs-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_entry_point_is_declared() -> None:
    (ep,) = [ep for ep in entry_points(group="koboi.plugins") if ep.name == "tools-fs"]
    assert ep.value == "koboi_tools_fs.plugin"


def test_registrations_are_owned_by_the_plugin(host: PluginHost) -> None:
    catalog = host.catalog()
    for name in TOOL_NAMES:
        entry = catalog.tools.get(name)
        assert entry is not None, name
        assert entry.plugin == "tools-fs"
        assert entry.description
    section = catalog.sections.get("tools_fs")
    assert section is not None and section.target is FsSettings


def test_every_setting_is_described() -> None:
    for name, field in FsSettings.model_fields.items():
        assert field.description, f"tools_fs.{name} has no description"


def test_the_factory_builds_each_tool_with_the_agents_settings(host: PluginHost) -> None:
    config = validate_config(
        {
            "llm": {"provider": "scripted"},
            "tools": {"builtin": list(TOOL_NAMES)},
            "tools_fs": {"max_read_bytes": 8192, "max_results": 7},
        },
        host.catalog(),
    )
    for name in TOOL_NAMES:
        entry = host.catalog().tools.get(name)
        assert entry is not None
        made = entry.target(config)
        assert isinstance(made, Tool) and made.name == name
    read = host.catalog().tools.get("read_file")
    assert read is not None
    assert "8,192 bytes" in read.target(config).description
    # Without the section: the defaults.
    plain = validate_config({"llm": {"provider": "scripted"}}, host.catalog())
    assert plain.section("tools_fs") is None
    assert "262,144 bytes" in read.target(plain).description


def test_section_mistakes_are_config_errors(host: PluginHost) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_config(
            {"llm": {"provider": "scripted"}, "tools_fs": {"max_result": 3, "max_read_bytes": 1}},
            host.catalog(),
        )
    problems = {p.path: p for p in caught.value.problems}
    assert "did you mean 'max_results'" in problems["tools_fs.max_result"].hint
    assert "tools_fs.max_read_bytes" in problems


@pytest.mark.anyio
async def test_an_agent_writes_and_reads_back_in_its_session_directory(open_dir: Path) -> None:
    workdir = open_dir / "workdirs"
    config: dict[str, Any] = {
        "llm": {
            "provider": "scripted",
            "script": [
                {
                    "tool_calls": [
                        {
                            "name": "write_file",
                            "arguments": {"path": "notes/plan.md", "content": "step 1\nstep 2\n"},
                        }
                    ]
                },
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes/plan.md"}}]},
                "done",
            ],
        },
        "tools": {"builtin": ["write_file", "read_file"]},
        "tools_fs": {"max_read_bytes": 8192},
        "sandbox": {"backend": "restricted", "workdir": str(workdir)},
        # Never the default durable store, which lives beside the working directory.
        "store": {"url": "memory://"},
    }
    async with KoboiAgent.from_dict(config, approver=AllowAllApprover()) as agent:
        assert sorted(agent.tools) == ["read_file", "write_file"]
        result = await agent.run("write the plan, then read it", session_id="sess-fs-1")
    assert result.outcome == "completed"
    assert result.output == "done"
    written, read = [m.content for m in result.messages if m.role == "tool"]
    assert written == "wrote 14 bytes to notes/plan.md (new file)"
    assert read == "step 1\nstep 2\n"
    session_dir = workdir / "sess-fs-1"
    assert (session_dir / "notes" / "plan.md").read_text() == "step 1\nstep 2\n"
    # Nothing was written anywhere else under the sandbox's root (but for the sandbox's own
    # record of which id each session runs as, when koboi is root).
    from koboi_sandbox.identity import RECORD_NAME

    assert [p.name for p in workdir.iterdir() if p.name != RECORD_NAME] == ["sess-fs-1"]
    # The session's directory belongs to the sandbox's user; what the tool created does too.
    owner = session_dir.stat().st_uid
    assert (session_dir / "notes").stat().st_uid == owner
    assert (session_dir / "notes" / "plan.md").stat().st_uid == owner
