"""Finding the skills a config offers: its ``search_paths`` and the shipped examples.

Each search path is a skill folder (it holds SKILL.md) or a folder whose
sub-folders are skills. A folder that is not a valid skill is reported (every
problem) and left out; the first of two skills with one name is kept and the
second reported. Each skill's ``source`` is where it came from as the config
writes it (``skills/code-review``, ``examples/code-review``): the journal keeps
that, never a path of this machine, so a session replays on another.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from koboi_skills.settings import SkillsSettings
from koboi_skills.spec import Skill, SkillInvalid, find_skill_file, read_skill

EXAMPLES_DIR = Path(__file__).parent / "examples"


@dataclass
class Found:
    skill: Skill
    source: str


@dataclass
class Library:
    """The skills of one config, by name, in discovery order, and the problems met."""

    skills: dict[str, Found] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def get(self, name: str) -> Found | None:
        return self.skills.get(name)


def candidates(root: Path) -> list[Path]:
    if find_skill_file(root) is not None:
        return [root]
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def discover(settings: SkillsSettings, base_dir: Path) -> Library:
    library = Library()
    roots: list[tuple[Path, str]] = []
    for entry in settings.search_paths:
        path = Path(entry).expanduser()
        roots.append((path if path.is_absolute() else base_dir / path, entry.rstrip("/")))
    for name in settings.example_names():
        roots.append((EXAMPLES_DIR / name, f"examples/{name}"))
    for root, written in roots:
        if not root.exists():
            library.problems.append(f"{written}: no such folder")
            continue
        for folder in candidates(root):
            source = written if folder == root else f"{written}/{folder.name}"
            try:
                skill = read_skill(folder)
            except SkillInvalid as exc:
                library.problems.append(f"{source}: " + "; ".join(exc.problems))
                continue
            if settings.only is not None and not any(
                fnmatch.fnmatchcase(skill.name, pattern) for pattern in settings.only
            ):
                continue
            kept = library.skills.get(skill.name)
            if kept is not None:
                library.problems.append(
                    f"{source}: a skill named {skill.name!r} is already offered from "
                    f"{kept.source}; this one is left out"
                )
                continue
            library.skills[skill.name] = Found(skill, source)
    return library


#: Libraries discovered for configs being assembled: the toolset and the interceptor of one
#: agent are built from the same settings object, and discovery is done once for both.
_LIBRARIES: dict[int, tuple[SkillsSettings, Library]] = {}
_KEPT = 16


def library_for(settings: SkillsSettings, base_dir: Path, *, keep: bool = True) -> Library:
    """The library of ``settings``, discovered once for the toolset and the interceptor of
    one agent; ``keep=False`` (the last of them) forgets it, so the next agent opened with
    the same config object reads the folders again."""
    kept = _LIBRARIES.get(id(settings))
    if kept is not None and kept[0] is settings:
        if not keep:
            del _LIBRARIES[id(settings)]
        return kept[1]
    library = discover(settings, base_dir)
    if not keep:
        return library
    if len(_LIBRARIES) >= _KEPT:
        _LIBRARIES.pop(next(iter(_LIBRARIES)))
    _LIBRARIES[id(settings)] = (settings, library)
    return library
