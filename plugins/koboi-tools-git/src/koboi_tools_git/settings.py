"""The ``tools_git:`` config section: who the agent's commits are by."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: The config section this plugin owns.
SECTION = "tools_git"

DEFAULT_AUTHOR_NAME = "koboi agent"
DEFAULT_AUTHOR_EMAIL = "agent@koboi.invalid"


class ToolsGitSection(BaseModel):
    """Settings of the git tools (``tools_git:`` in an agent's config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    author_name: str = Field(
        default=DEFAULT_AUTHOR_NAME,
        min_length=1,
        max_length=200,
        description="Author and committer name of the commits git_commit makes.",
    )
    author_email: str = Field(
        default=DEFAULT_AUTHOR_EMAIL,
        min_length=3,
        max_length=200,
        description="Author and committer email of the commits git_commit makes.",
    )

    @field_validator("author_name", "author_email")
    @classmethod
    def _one_plain_line(cls, value: str) -> str:
        # git would strip or mangle these; say so at config time instead.
        if any(c in value for c in "<>\n\r\0"):
            raise ValueError("must be one line without '<' or '>'")
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()


def settings_from(config: Any) -> ToolsGitSection:
    """The validated section of ``config`` (an ``AgentConfig``), or the defaults when absent."""
    section = config.section(SECTION) if config is not None else None
    if section is None:
        return ToolsGitSection()
    if not isinstance(section, ToolsGitSection):  # registered by another plugin under our name
        return ToolsGitSection.model_validate(section.model_dump())
    return section
