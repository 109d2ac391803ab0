"""The SKILL.md format of agentskills.io: reading a skill folder and checking it.

A skill is a folder whose name is the skill's name, holding ``SKILL.md``
(``skill.md`` is read too): YAML frontmatter between ``---`` lines, then the
instructions in Markdown::

    ---
    name: code-review
    description: Review a change for bugs, risks and missing tests. Use when ...
    license: MIT
    metadata:
      author: koboi
    ---
    # Code review
    ...

The frontmatter may hold ``name`` and ``description`` (required),
``license``, ``compatibility``, ``allowed-tools`` and ``metadata`` (a mapping
of strings), nothing else. ``name``: at most 64 characters, lower case,
letters, digits and single hyphens inside, and the folder's name.
``description``: at most 1024 characters; ``compatibility`` at most 500.

The frontmatter is read the strict way the format's reference implementation
reads it (every scalar is text; flow collections, anchors, aliases, tags and
repeated keys are refused), so a skill valid here is valid everywhere. The
tests compare this module's verdicts with the reference library's
(``skills-ref``) on a corpus and on generated skills.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SKILL_FILES = ("SKILL.md", "skill.md")
FIELDS = frozenset({"name", "description", "license", "allowed-tools", "metadata", "compatibility"})
MAX_NAME, MAX_DESCRIPTION, MAX_COMPATIBILITY = 64, 1024, 500


class SkillInvalid(Exception):
    """A skill folder that does not follow the format: ``problems`` says each way it fails."""

    def __init__(self, where: Path, problems: list[str]) -> None:
        super().__init__(f"{where}: " + "; ".join(problems))
        self.where = where
        self.problems = problems


@dataclass(frozen=True)
class Skill:
    """A valid skill folder (its instructions are read when asked: :meth:`body`)."""

    name: str
    description: str
    folder: Path
    skill_file: Path
    license: str | None = None
    compatibility: str | None = None
    allowed_tools: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def body(self) -> str:
        """The Markdown after the frontmatter (read again: a skill may change on disk)."""
        return split_frontmatter(self.skill_file.read_text(encoding="utf-8"))[1]

    def files(self, limit: int = 200) -> list[str]:
        """The folder's other files (tier 3), as relative POSIX paths, sorted; at most ``limit``."""
        found: list[str] = []
        for path in sorted(self.folder.rglob("*")):
            if path.is_file() and not path.is_symlink() and path != self.skill_file:
                relative = path.relative_to(self.folder)
                if not any(part.startswith(".") for part in relative.parts):
                    found.append(relative.as_posix())
            if len(found) >= limit:
                break
        return found


def find_skill_file(folder: Path) -> Path | None:
    for name in SKILL_FILES:
        path = folder / name
        if path.is_file():
            return path
    return None


class _FrontmatterError(Exception):
    pass


def split_frontmatter(text: str) -> tuple[str, str]:
    """``(frontmatter, body)`` of a SKILL.md's text; _FrontmatterError when there is none."""
    if not text.startswith("---"):
        raise _FrontmatterError("SKILL.md must begin with YAML frontmatter between '---' lines")
    parts = text.split("---", 2)
    if len(parts) < 3:
        raise _FrontmatterError("the frontmatter of SKILL.md has no closing '---' line")
    return parts[1], parts[2].strip()


_REFUSED_TOKENS: dict[type[yaml.Token], str] = {
    yaml.AnchorToken: "anchors are not allowed in the frontmatter",
    yaml.AliasToken: "aliases are not allowed in the frontmatter",
    yaml.TagToken: "YAML tags are not allowed in the frontmatter",
    yaml.FlowMappingStartToken: "flow style ({...}) is not allowed in the frontmatter",
    yaml.FlowSequenceStartToken: "flow style ([...]) is not allowed in the frontmatter",
}


#: libyaml's reader where PyYAML was built with it (the same results, several times faster).
_LOADER: Any = getattr(yaml, "CBaseLoader", yaml.BaseLoader)
#: The characters that begin an anchor, an alias, a tag or a flow collection: text without
#: any of them needs no token scan.
_MARKERS = frozenset("&*!{[\t")


def _compose_strict(text: str) -> yaml.Node | None:
    """The frontmatter's node tree, refusing what a strict reader refuses: anchors,
    aliases, tags, flow style and repeated keys."""
    if not _MARKERS.isdisjoint(text):
        quoted: list[tuple[int, int]] = []
        for token in yaml.scan(text, Loader=_LOADER):
            refused = _REFUSED_TOKENS.get(type(token))
            if refused is not None:
                raise _FrontmatterError(refused + "; write plain block-style YAML")
            if isinstance(token, yaml.ScalarToken) and token.style:
                quoted.append((token.start_mark.index, token.end_mark.index))
        if "\t" in text:
            _check_tabs(text, quoted)
    node = yaml.compose(text, Loader=_LOADER)
    if node is not None:
        _check_keys(node)
    return node


def _check_tabs(text: str, quoted: list[tuple[int, int]]) -> None:
    """The strict reader takes a tab only inside a quoted or block scalar, or a comment."""

    def inside(at: int) -> bool:
        return any(start <= at < end for start, end in quoted)

    line_start = 0
    for line in text.splitlines(keepends=True):
        comment = None
        for offset, char in enumerate(line):
            at = line_start + offset
            starts_comment = offset == 0 or line[offset - 1] in " \t"
            if char == "#" and comment is None and starts_comment and not inside(at):
                comment = offset
            if char == "\t" and not inside(at) and (comment is None or offset < comment):
                raise _FrontmatterError(
                    "a tab outside quotes in the frontmatter; indent and separate with spaces"
                )
        line_start += len(line)


def _check_keys(node: yaml.Node) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                raise _FrontmatterError("frontmatter keys must be plain text")
            if key.value in seen:
                raise _FrontmatterError(f"the key {key.value!r} appears twice in the frontmatter")
            seen.add(key.value)
            _check_keys(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_keys(item)


def parse_frontmatter(text: str) -> dict[str, Any]:
    """The frontmatter as a mapping whose scalars are all text; _FrontmatterError if not one."""
    try:
        node = _compose_strict(text)
        # The base constructor keeps every scalar as text, as the format's reader does.
        data = yaml.constructor.BaseConstructor().construct_document(node) if node else None
    except yaml.YAMLError as exc:
        raise _FrontmatterError(f"the frontmatter is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise _FrontmatterError("the frontmatter of SKILL.md must be a YAML mapping")
    return data


def _name_problems(name: Any, folder: Path) -> list[str]:
    if not isinstance(name, str) or not name.strip():
        return ["'name' must be non-empty text"]
    name = unicodedata.normalize("NFKC", name.strip())
    problems = []
    if len(name) > MAX_NAME:
        problems.append(f"the name {name!r} is {len(name)} characters long, more than {MAX_NAME}")
    if name != name.lower():
        problems.append(f"the name {name!r} must be lower case")
    if name.startswith("-") or name.endswith("-"):
        problems.append("the name must not begin or end with '-'")
    if "--" in name:
        problems.append("the name must not hold '--'")
    if not all(c.isalnum() or c == "-" for c in name):
        problems.append(f"the name {name!r} may hold only letters, digits and '-'")
    if unicodedata.normalize("NFKC", folder.name) != name:
        problems.append(
            f"the folder is named {folder.name!r}; it must be named as the skill, {name!r}"
        )
    return problems


def _text_problems(data: dict[str, Any], key: str, limit: int, *, required: bool) -> list[str]:
    if key not in data:
        return [f"the frontmatter has no {key!r}"] if required else []
    value = data[key]
    if not isinstance(value, str) or (required and not value.strip()):
        return [f"{key!r} must be {'non-empty ' if required else ''}text"]
    if len(value) > limit:
        return [f"{key!r} is {len(value)} characters long, more than {limit}"]
    return []


def problems_of(data: dict[str, Any], folder: Path) -> list[str]:
    """Every way parsed frontmatter breaks the format ([] when valid)."""
    problems: list[str] = []
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        problems.append(
            f"unknown frontmatter field(s) {', '.join(map(repr, unknown))}: only "
            f"{', '.join(sorted(FIELDS))} are allowed (put anything else under 'metadata')"
        )
    if "name" not in data:
        problems.append("the frontmatter has no 'name'")
    else:
        problems.extend(_name_problems(data["name"], folder))
    problems.extend(_text_problems(data, "description", MAX_DESCRIPTION, required=True))
    problems.extend(_text_problems(data, "compatibility", MAX_COMPATIBILITY, required=False))
    return problems


def _inspect(folder: Path) -> tuple[list[str], dict[str, Any], Path | None]:
    """(problems, frontmatter, skill file) of a folder, reading its SKILL.md once."""
    if not folder.exists():
        return [f"{folder} does not exist"], {}, None
    if not folder.is_dir():
        return [f"{folder} is not a folder"], {}, None
    skill_file = find_skill_file(folder)
    if skill_file is None:
        return ["the folder has no SKILL.md"], {}, None
    try:
        front, _ = split_frontmatter(skill_file.read_text(encoding="utf-8"))
        data = parse_frontmatter(front)
    except (_FrontmatterError, UnicodeDecodeError) as exc:
        return [str(exc)], {}, skill_file
    return problems_of(data, folder), data, skill_file


def check_folder(folder: Path) -> list[str]:
    """Every way the folder breaks the format ([] when it is a valid skill)."""
    return _inspect(folder)[0]


def read_skill(folder: Path) -> Skill:
    """The skill in ``folder``; :class:`SkillInvalid` saying every problem when it is not one."""
    problems, data, skill_file = _inspect(folder)
    if problems or skill_file is None:
        raise SkillInvalid(folder, problems)
    metadata = data.get("metadata")
    return Skill(
        name=unicodedata.normalize("NFKC", str(data["name"]).strip()),
        description=str(data["description"]).strip(),
        folder=folder,
        skill_file=skill_file,
        license=_optional(data.get("license")),
        compatibility=_optional(data.get("compatibility")),
        allowed_tools=_optional(data.get("allowed-tools")),
        metadata={str(k): str(v) for k, v in metadata.items()}
        if isinstance(metadata, dict)
        else {},
    )


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)
