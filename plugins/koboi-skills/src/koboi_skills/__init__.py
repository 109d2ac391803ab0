"""koboi-skills: agent skills in the agentskills.io format, disclosed in three tiers.

Importing this package costs nothing: the settings, the reader and the tools
are imported when an agent or a command uses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_skills._version import __version__
    from koboi_skills.settings import SkillsSettings

__all__ = ["SkillsSettings", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_skills._version import __version__

        return __version__
    if name == "SkillsSettings":
        from koboi_skills.settings import SkillsSettings

        return SkillsSettings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
