"""The plugin as an agent meets it: entry point, config section, tool factories."""

from __future__ import annotations

from pathlib import Path

import pytest

from koboi import KoboiAgent
from koboi.config import validate_config
from koboi.errors import ConfigError
from koboi_tools_git.settings import ToolsGitSection
from koboi_tools_git.tools import GitCommit

NAMES = ["git_status", "git_diff", "git_log", "git_commit"]


def _config(tmp_path: Path, **extra: object) -> dict[str, object]:
    return {
        "llm": {"provider": "scripted", "script": ["ok"]},
        "tools": {"builtin": NAMES},
        "sandbox": {"backend": "passthrough", "workdir": str(tmp_path)},
        # Never the default durable store, which lives beside the working directory.
        "store": {"url": "memory://"},
        **extra,
    }


@pytest.mark.anyio
async def test_the_tools_are_made_with_the_config_section(tmp_path: Path) -> None:
    section = {"author_name": "Config Author", "author_email": "config@example.invalid"}
    async with KoboiAgent.from_dict(_config(tmp_path, tools_git=section)) as agent:
        assert sorted(agent.tools) == sorted(NAMES)
        commit = agent.tools["git_commit"]
        assert isinstance(commit, GitCommit)
        assert commit.settings == ToolsGitSection(**section)
    async with KoboiAgent.from_dict(_config(tmp_path)) as agent:  # no section: defaults
        settings = agent.tools["git_commit"].settings  # type: ignore[attr-defined]
        assert (settings.author_name, settings.author_email) == (
            "koboi agent",
            "agent@koboi.invalid",
        )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"author": "x"}, r"tools_git\.author: unknown key"),
        ({"author_name": "a <b>"}, r"tools_git\.author_name"),
        ({"author_email": ""}, r"tools_git\.author_email"),
    ],
)
def test_section_mistakes_are_config_errors(
    tmp_path: Path, section: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_config(_config(tmp_path, tools_git=section))
