"""The ``skills:`` section.

```yaml
skills:
  search_paths: [skills]        # folders of skill folders, or skill folders (config-relative)
  examples: true                # also the four skills shipped with koboi-skills
  budget_tokens: 4000           # what skills may add to the context, all tiers together
  commands:                     # !`cmd` preprocessing of skill bodies
    enabled: false              # off by default: a skill's commands are never run
```

koboi-agent's ``search_paths`` and ``budget_chars`` are read too
(``budget_chars`` becomes ``budget_tokens``, four characters a token).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The skills shipped in this package (koboi-agent's four, in the format's spelling:
#: a skill's name is lower case with hyphens, so code_review is code-review).
EXAMPLES = ("code-review", "customer-service", "hotel-receptionist", "search-and-summarize")
CHARS_PER_TOKEN = 4


class CommandSettings(BaseModel):
    """``skills.commands``: running a skill's ``!`cmd``` lines when it is activated."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=False,
        description="Run the !`command` lines of a skill's body when it is activated. Off: they "
        "are never run (a notice takes their place).",
    )
    skills: list[str] = Field(
        default_factory=list,
        description="The skills whose commands may run, by name ('*' for all). Trust is given "
        "by this config, never by the skill itself.",
    )
    require_isolation: bool = Field(
        default=True,
        description="Run commands only where the sandbox isolates (restricted); elsewhere they "
        "are refused.",
    )
    timeout: float = Field(default=10.0, gt=0, le=120, description="Seconds per command.")
    max_output: int = Field(
        default=4000, ge=100, le=100_000, description="Characters of a command's output kept."
    )


class SkillsSettings(BaseModel):
    """The ``skills`` section (see the module doc)."""

    model_config = ConfigDict(extra="forbid")

    search_paths: list[str] = Field(
        default_factory=list,
        description="Where skills are: each entry a skill folder (holding SKILL.md) or a folder "
        "of skill folders; relative to the config file's folder. The first of two skills with "
        "one name wins.",
    )
    examples: bool | list[str] = Field(
        default=False,
        description=f"Also offer the skills shipped with koboi-skills: true for all "
        f"({', '.join(EXAMPLES)}), or a list of their names.",
    )
    only: list[str] | None = Field(
        default=None, description="Offer only these skills, by name (default: every one found)."
    )
    budget_tokens: int = Field(
        default=4000,
        ge=100,
        le=200_000,
        description="Tokens (about four characters each) skills may add to a session's "
        "context: the list of skills, the instructions of activated skills and the files read. "
        "What does not fit is cut, with a notice.",
    )
    commands: CommandSettings = Field(
        default_factory=CommandSettings, description="!`cmd` preprocessing (off by default)."
    )

    @model_validator(mode="before")
    @classmethod
    def _agent_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "budget_chars" in data:
            data = dict(data)
            chars = data.pop("budget_chars")
            if not isinstance(chars, int) or chars < 400:
                raise ValueError("budget_chars: a whole number of characters, at least 400")
            data.setdefault("budget_tokens", math.ceil(chars / CHARS_PER_TOKEN))
        return {} if data is None else data

    @model_validator(mode="after")
    def _known_examples(self) -> SkillsSettings:
        if isinstance(self.examples, list):
            unknown = sorted(set(self.examples) - set(EXAMPLES))
            if unknown:
                raise ValueError(
                    f"examples: no shipped skill named {', '.join(unknown)} "
                    f"(shipped: {', '.join(EXAMPLES)})"
                )
        return self

    def example_names(self) -> list[str]:
        if self.examples is True:
            return list(EXAMPLES)
        return list(self.examples) if isinstance(self.examples, list) else []


def tokens(text: str) -> int:
    """The estimate the budget counts with: four characters a token, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)
