"""The tools of tiers two and three: ``activate`` and ``read_file``, offered as
``skills__activate`` and ``skills__read_file``.

They come from a toolset, so an agent whose config has a ``skills`` section is
offered them, and no other agent. What they return is the tool call's result:
journaled with it, and served from the journal on replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from koboi.config import AgentConfig
from koboi.errors import ToolError
from koboi.tools import Tool, ToolContext, tool
from koboi.toolsets import Toolset, ToolsetContext
from koboi_skills import session as S
from koboi_skills.commands import preprocess
from koboi_skills.discovery import Library, library_for
from koboi_skills.settings import SkillsSettings

SECTION = "skills"
MAX_FILE_BYTES = 2_000_000


def _session(ctx: ToolContext) -> S.SessionSkills:
    if ctx.run is None:
        raise ToolError("skills are used inside a run")
    return S.of(ctx.run.state)


def make_tools(settings: SkillsSettings, config: AgentConfig, library: Library) -> list[Tool]:
    commands_may_run = settings.commands.enabled

    @tool(name=S.ACTIVATE, risk="safe", idempotent=not commands_may_run, thread=False)
    async def activate_skill(name: str, ctx: ToolContext) -> str:
        """Read a skill's instructions (listed in <available_skills>) to follow them now.

        Args:
            name: The skill's name, as listed.
        """
        found = library.get(name)
        session = _session(ctx)
        if found is None or name not in {e["name"] for e in session.catalog}:
            offered = ", ".join(e["name"] for e in session.catalog) or "none"
            raise ToolError(f"no skill named {name!r} is offered (skills: {offered})")
        skill = found.skill
        try:
            body = skill.body()
        except (OSError, ValueError) as exc:
            raise ToolError(f"skill {name!r} could not be read: {exc}") from None
        body = await preprocess(body, name, settings.commands, config, ctx)
        files = skill.files()
        text = f'<skill name="{name}">\n{body}\n</skill>'
        if files:
            text += "\nFiles of this skill (skills__read_file): " + ", ".join(files)
        if (name, "body") in session.loaded:  # charged the first time it was added
            return S.again(text, session, settings.budget_tokens, (name, "body"), f"skill {name!r}")
        # Charged by the interceptor when the result is in (skills.loaded): the journal,
        # not this tool, keeps the budget, so a replay serving this result keeps it too.
        return S.fit(text, session, settings.budget_tokens, f"skill {name!r}")

    @tool(name=S.READ_FILE, risk="safe", idempotent=True, thread=False)
    def read_skill_file(skill: str, path: str, ctx: ToolContext) -> str:
        """Read a file of an activated skill (one it lists), when its instructions need it.

        Args:
            skill: The skill's name.
            path: The file's path inside the skill, as listed (e.g. references/checklist.md).
        """
        session = _session(ctx)
        found = library.get(skill)
        if found is None or (skill, "body") not in session.loaded:
            raise ToolError(f"activate the skill {skill!r} first (skills__activate)")
        relative = PurePosixPath(path)
        if relative.is_absolute() or ".." in relative.parts or path not in found.skill.files():
            listed = ", ".join(found.skill.files()) or "none"
            raise ToolError(f"skill {skill!r} has no file {path!r} (its files: {listed})")
        target = Path(found.skill.folder, *relative.parts)
        if not target.resolve().is_relative_to(found.skill.folder.resolve()):
            raise ToolError(f"{path!r} leads outside the skill's folder")
        data = target.read_bytes()[: MAX_FILE_BYTES + 1]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{path!r} is not a text file") from None
        key = (skill, f"file:{path}")
        if key in session.loaded:
            return S.again(text, session, settings.budget_tokens, key, f"{skill}/{path}")
        return S.fit(text, session, settings.budget_tokens, f"{skill}/{path}")

    return [activate_skill, read_skill_file]


class SkillTools(Toolset):
    """``skills__activate`` and ``skills__read_file``, for an agent with a ``skills`` section."""

    name = S.TOOLSET

    def __init__(self, settings: SkillsSettings, config: AgentConfig) -> None:
        self.settings = settings
        self.config = config
        self._tools: list[Tool] = []

    async def open(self, context: ToolsetContext) -> None:
        library = library_for(self.settings, self.config.base_dir)
        self._tools = make_tools(self.settings, self.config, library)

    def tools(self) -> Sequence[Tool]:
        return list(self._tools)


def create_toolset(config: AgentConfig) -> SkillTools | None:
    settings = config.section(SECTION)
    if not isinstance(settings, SkillsSettings):
        return None
    return SkillTools(settings, config)
