"""What a session knows of its skills, rebuilt from its own journal.

- ``skills.catalog`` (once, in the session's first run): the skills offered —
  name, description, source — and the problems met finding them. The list the
  model reads before every call is a pure function of this event and the
  budget, so resume and replay send exactly what was sent.
- ``skills.loaded`` (each activation, each file read): which part of which
  skill was added, and how many tokens it was charged against the budget.
- ``skills.command`` (each ``!`cmd```): whether it ran, and why not.

Nothing here is kept elsewhere: a crash, a resume on another replica and a
replay see the same state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html import escape
from typing import Any

from koboi.store import JournalEvent
from koboi.tools import Tool
from koboi.toolsets import ToolsetTool
from koboi_skills.discovery import Library
from koboi_skills.settings import SkillsSettings, tokens

STATE = "skills.session"
#: The toolset and its tools' own names: the model sees ``skills__activate`` and
#: ``skills__read_file`` (the toolset's namespace, unless tools.namespaces renames it).
TOOLSET = "skills"
ACTIVATE = "activate"
READ_FILE = "read_file"
CATALOG_EVENT = "skills.catalog"
LOADED_EVENT = "skills.loaded"

HEADER = (
    "<available_skills>\n"
    "Skills hold instructions for particular tasks. When the task at hand matches a "
    "skill's description, call skills__activate with its name and follow what it says; read "
    "the files it names with skills__read_file when you need them."
)
FOOTER = "</available_skills>"


@dataclass
class SessionSkills:
    """The session's catalog and what its skills have cost so far."""

    catalog: list[dict[str, str]] = field(default_factory=list)
    catalog_text: str = ""
    used: int = 0
    loaded: set[tuple[str, str]] = field(default_factory=set)
    #: Parts that were cut the first time: shown again, they are cut again.
    truncated: set[tuple[str, str]] = field(default_factory=set)

    def remaining(self, budget: int) -> int:
        return max(budget - self.used, 0)


def catalog_entries(library: Library) -> list[dict[str, str]]:
    return [
        {"name": name, "description": found.skill.description, "source": found.source}
        for name, found in library.skills.items()
    ]


def render_catalog(entries: Iterable[Mapping[str, str]], budget: int) -> tuple[str, int]:
    """The list the model reads, within ``budget`` tokens; and how many skills it lists."""
    entries = list(entries)
    if not entries:
        return "", 0
    lines = [HEADER]
    # Each line is counted with its newline: the sum bounds the whole text's count.
    used = tokens(HEADER + "\n") + tokens(FOOTER)
    listed = 0
    for index, entry in enumerate(entries):
        line = f'<skill name="{escape(entry["name"])}">{escape(entry["description"])}</skill>'
        after = len(entries) - index - 1
        reserve = tokens(_catalog_notice(after, budget) + "\n") if after else 0
        if used + tokens(line + "\n") + reserve > budget:
            lines.append(_catalog_notice(len(entries) - index, budget))
            break
        lines.append(line)
        used += tokens(line + "\n")
        listed += 1
    lines.append(FOOTER)
    return "\n".join(lines), listed


def _catalog_notice(left_out: int, budget: int) -> str:
    return (
        f"[{left_out} more skill(s) not listed: the skills budget "
        f"(skills.budget_tokens = {budget}) is used up]"
    )


def of(state: dict[str, Any]) -> SessionSkills:
    found = state.get(STATE)
    if not isinstance(found, SessionSkills):
        found = state[STATE] = SessionSkills()
    return found


def set_catalog(session: SessionSkills, entries: list[dict[str, str]], budget: int) -> None:
    session.catalog = entries
    session.catalog_text, _ = render_catalog(entries, budget)
    session.used += tokens(session.catalog_text)


def restore(
    state: dict[str, Any], events: Iterable[JournalEvent], settings: SkillsSettings
) -> None:
    session = state[STATE] = SessionSkills()
    for event in events:
        if event.type == CATALOG_EVENT:
            entries = [dict(e) for e in event.data.get("skills", ())]
            set_catalog(session, entries, settings.budget_tokens)
        elif event.type == LOADED_EVENT:
            part = (str(event.data.get("skill")), str(event.data.get("part")))
            session.used += int(event.data.get("tokens", 0))
            session.loaded.add(part)
            if event.data.get("truncated"):
                session.truncated.add(part)


TRUNCATED = "truncated: about "


def fit(text: str, session: SessionSkills, budget: int, what: str) -> str:
    """``text`` cut to what the budget has left, with a notice saying so."""
    needed = tokens(text)
    left = session.remaining(budget)
    if needed <= left:
        return text
    notice = (
        f"\n\n[{what} {TRUNCATED}{needed} tokens, {left} left in the skills budget "
        f"(skills.budget_tokens = {budget}); the rest is not shown]"
    )
    room = max(left - tokens(notice), 0) * 4
    return text[:room].rstrip() + notice


def part_of(tool: Tool, arguments: Mapping[str, Any]) -> tuple[str, str] | None:
    """Which part of which skill a call of a skills tool adds (None for other tools):
    the ``skills`` toolset's tools, under whatever namespace they are offered."""
    if not isinstance(tool, ToolsetTool) or tool.toolset != TOOLSET:
        return None
    if tool.original.name == ACTIVATE:
        return str(arguments.get("name", "")), "body"
    if tool.original.name == READ_FILE:
        return str(arguments.get("skill", "")), f"file:{arguments.get('path', '')}"
    return None


def charge(
    session: SessionSkills, budget: int, skill: str, part: str, shown: str
) -> dict[str, Any]:
    """Charge what a skills tool returned to the budget; the ``skills.loaded`` event's data."""
    cost = min(tokens(shown), session.remaining(budget))
    session.used += cost
    session.loaded.add((skill, part))
    truncated = TRUNCATED in shown
    if truncated:
        session.truncated.add((skill, part))
    return {"skill": skill, "part": part, "tokens": cost, "truncated": truncated}


def again(text: str, session: SessionSkills, budget: int, key: tuple[str, str], what: str) -> str:
    """A part added before, asked for again: not charged twice, and cut again if it was cut
    (with what the budget has left now), so asking twice never shows more."""
    return fit(text, session, budget, what) if key in session.truncated else text
