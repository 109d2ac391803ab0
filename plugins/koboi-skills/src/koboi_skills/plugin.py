"""koboi hooks of koboi-skills.

Only ``@hookimpl`` functions here: the settings, the SKILL.md reader (PyYAML),
the toolset and the interceptor are imported when an agent uses the section.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from koboi.hookspecs import hookimpl

SECTION = "skills"


@hookimpl
def koboi_register_config_sections(register: Callable[..., None]) -> None:
    from koboi_skills.settings import SkillsSettings

    register(
        SECTION,
        SkillsSettings,
        description="Agent skills (SKILL.md folders): where they are, their budget, !cmd rules.",
    )


def create_toolset(config: Any) -> Any:
    from koboi_skills.skilltools import create_toolset

    return create_toolset(config)


@hookimpl
def koboi_register_toolsets(register: Callable[..., None]) -> None:
    register("skills", create_toolset, description="skills__activate and skills__read_file.")


@hookimpl
def koboi_register_interceptors(register: Callable[..., None], config: Any) -> None:
    settings = config.section(SECTION)
    if settings is None:
        return
    from koboi_skills.discovery import library_for
    from koboi_skills.interceptor import SkillCatalog

    register(SkillCatalog(settings, library_for(settings, config.base_dir, keep=False)))


@hookimpl
def koboi_register_commands(register: Callable[..., None]) -> None:
    register("skills", "koboi_skills.cli:app", help="List, show and validate agent skills.")
