"""``git status --porcelain=v2 --branch`` turned into a summary a model reads at a glance.

Parsed line by line (not ``-z``: a sandbox may strip NUL bytes from output).
Paths are kept as git printed them: with ``core.quotePath=false`` only names
with control characters, quotes or backslashes are C-quoted, which keeps
such a name unambiguous for the reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Most entries listed per group; the rest are counted.
MAX_LISTED = 100

_WORDS = {
    "M": "modified",
    "T": "type changed",
    "A": "added",
    "D": "deleted",
    "R": "renamed",
    "C": "copied",
    "U": "unmerged",
}
_CONFLICTS = {
    "DD": "both deleted",
    "AU": "added by us",
    "UD": "deleted by them",
    "UA": "added by them",
    "DU": "deleted by us",
    "AA": "both added",
    "UU": "both modified",
}


@dataclass
class Status:
    """What ``git status`` says, grouped."""

    oid: str | None = None  # None: no commit yet
    branch: str | None = None  # None: detached HEAD
    upstream: str | None = None
    ahead: int = 0
    behind: int = 0
    staged: list[str] = field(default_factory=list)
    unstaged: list[str] = field(default_factory=list)
    untracked: list[str] = field(default_factory=list)
    conflicted: list[str] = field(default_factory=list)
    incomplete: bool = False  # git's output was cut short


def parse_status(text: str, *, truncated: bool = False) -> Status:
    """Parse porcelain v2 output (with ``--branch``); unknown lines are ignored."""
    status = Status(incomplete=truncated)
    lines = text.split("\n")
    if truncated and lines:
        lines = lines[:-1]  # the last line may be cut in the middle
    for line in lines:
        if line.startswith("# "):
            _header(status, line[2:])
        elif line.startswith("1 "):
            fields = line.split(" ", 8)
            if len(fields) == 9:
                _changed(status, fields[1], fields[8])
        elif line.startswith("2 "):
            fields = line.split(" ", 9)
            if len(fields) == 10:
                path, _, original = fields[9].partition("\t")
                _changed(status, fields[1], path, original or None)
        elif line.startswith("u "):
            fields = line.split(" ", 10)
            if len(fields) == 11:
                how = _CONFLICTS.get(fields[1], f"unmerged ({fields[1]})")
                status.conflicted.append(f"{how}: {fields[10]}")
        elif line.startswith("? "):
            status.untracked.append(line[2:])
    return status


def _header(status: Status, header: str) -> None:
    key, _, value = header.partition(" ")
    if key == "branch.oid":
        status.oid = None if value == "(initial)" else value
    elif key == "branch.head":
        status.branch = None if value == "(detached)" else value
    elif key == "branch.upstream":
        status.upstream = value
    elif key == "branch.ab":
        for part in value.split():
            if part[:1] in "+-" and part[1:].isdigit():
                if part[0] == "+":
                    status.ahead = int(part[1:])
                else:
                    status.behind = int(part[1:])


def _changed(status: Status, xy: str, path: str, original: str | None = None) -> None:
    if len(xy) != 2:
        return
    for code, group in ((xy[0], status.staged), (xy[1], status.unstaged)):
        if code == ".":
            continue
        word = _WORDS.get(code, code)
        shown = f"{original} -> {path}" if original is not None and code in "RC" else path
        group.append(f"{word}: {shown}")


def summarize(status: Status, *, limit: int = MAX_LISTED) -> str:
    """The status as a few readable lines."""
    if status.branch is None:
        head = f"HEAD detached at {status.oid[:12]}" if status.oid else "HEAD detached"
    else:
        head = f"On branch {status.branch}"
    if status.oid is None:
        head += " (no commits yet)"
    if status.upstream:
        head += f", tracking {status.upstream}"
        if status.ahead or status.behind:
            head += f": ahead {status.ahead}, behind {status.behind}"
        else:
            head += ": up to date"
    out = [head]
    groups = (
        ("Conflicted", status.conflicted),
        ("Staged (will be committed)", status.staged),
        ("Not staged", status.unstaged),
        ("Untracked", status.untracked),
    )
    for title, entries in groups:
        if not entries:
            continue
        out.append(f"{title} ({len(entries)}):")
        out.extend(f"  {entry}" for entry in entries[:limit])
        if len(entries) > limit:
            out.append(f"  ... and {len(entries) - limit} more")
    if not any(entries for _, entries in groups):
        out.append("Nothing to commit, working tree clean.")
    if status.incomplete:
        out.append("[git's output was truncated: the lists above may be incomplete]")
    return "\n".join(out)
