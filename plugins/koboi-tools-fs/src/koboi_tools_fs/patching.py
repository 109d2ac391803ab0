"""Unified diffs: parse them, and apply their hunks to text held in memory.

Nothing here touches a file: :mod:`koboi_tools_fs.workspace` reads every
file a patch names, applies all hunks here, and writes only when every hunk
of every file applied.

What is accepted (the output of ``diff -u`` and ``git diff``):

- ``--- old`` / ``+++ new`` headers, with ``a/`` and ``b/`` prefixes stripped
  when both sides carry them, ``/dev/null`` for a created or deleted file, a
  tab and a timestamp after the name ignored; lines between files (``diff
  --git``, ``index``, ``new file mode``...) are ignored;
- hunks ``@@ -start,count +start,count @@``, whose counts are checked
  against their bodies; an empty line inside a hunk is an empty context line
  (some editors strip the lone space); ``\\ No newline at end of file``.

A hunk applies *cleanly* when its context and removed lines equal the file's
lines exactly, at the line the header names or, if the file moved, at the
nearest place after the previous hunk (an offset, as ``patch`` allows). No
fuzz: a hunk whose lines are not all found exactly is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_DEV_NULL = "/dev/null"


class PatchError(ValueError):
    """The patch is malformed or does not apply; the message says where and why."""


@dataclass
class Hunk:
    """One ``@@`` block: lines tagged ``' '`` (context), ``'-'`` (removed), ``'+'`` (added)."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    #: (tag, text including its line ending)
    lines: list[tuple[str, str]] = field(default_factory=list)

    @property
    def old_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "+"]

    @property
    def new_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "-"]


@dataclass
class FilePatch:
    """The hunks for one file. ``old_path`` None: created; ``new_path`` None: deleted."""

    old_path: str | None
    new_path: str | None
    hunks: list[Hunk]

    @property
    def path(self) -> str:
        """The path the patch changes (the new one, or the old one for a deletion)."""
        path = self.new_path if self.new_path is not None else self.old_path
        assert path is not None
        return path


def parse_patch(text: str) -> list[FilePatch]:
    """Every file of a unified diff, in order; :class:`PatchError` if it is malformed."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old_path, new_path = _header_paths(line[4:], lines[i + 1][4:], i + 1)
            i += 2
            hunks: list[Hunk] = []
            while i < len(lines) and lines[i].startswith("@@"):
                hunk, i = _parse_hunk(lines, i)
                hunks.append(hunk)
            shown = new_path if new_path is not None else old_path
            if not hunks:
                raise PatchError(f"the patch has no hunks (@@ ... @@) for {shown!r}")
            if i < len(lines) and lines[i][:1] in (" ", "+", "-") and not _is_header(lines, i):
                raise PatchError(
                    f"line {i + 1} of the patch: hunk {len(hunks)} of {shown!r} has more lines "
                    "than its @@ header counts"
                )
            files.append(FilePatch(old_path, new_path, hunks))
            continue
        if line.startswith("@@"):
            raise PatchError(
                f"line {i + 1} of the patch: a hunk without '--- old' and '+++ new' file headers"
            )
        i += 1  # lines between files: diff --git, index, mode lines, comments
    if not files:
        raise PatchError("no file headers ('--- path' then '+++ path') found: not a unified diff")
    return files


def _is_header(lines: list[str], i: int) -> bool:
    return lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")


def _header_paths(old_raw: str, new_raw: str, line_no: int) -> tuple[str | None, str | None]:
    old = _header_path(old_raw)
    new = _header_path(new_raw)
    if old is None and new is None:
        raise PatchError(f"line {line_no} of the patch: both sides are /dev/null")
    # git's a/ and b/ prefixes: stripped only when every named side carries its own.
    if (old is None or old.startswith("a/")) and (new is None or new.startswith("b/")):
        old = old[2:] if old is not None else None
        new = new[2:] if new is not None else None
    if old is not None and new is not None and old != new:
        raise PatchError(
            f"line {line_no} of the patch renames {old!r} to {new!r}; apply_patch does not "
            "rename files (use move_file, then patch the new path)"
        )
    return old, new


def _header_path(raw: str) -> str | None:
    name = raw.split("\t", 1)[0].rstrip()
    if len(name) >= 2 and name[0] == name[-1] == '"':
        name = name[1:-1]
    if name == _DEV_NULL:
        return None
    if not name:
        raise PatchError("a file header names no path")
    return name


def _parse_hunk(lines: list[str], i: int) -> tuple[Hunk, int]:
    match = _HUNK_HEADER.match(lines[i])
    if match is None:
        raise PatchError(f"line {i + 1} of the patch: malformed hunk header {lines[i][:60]!r}")
    old_start, old_count, new_start, new_count = (
        int(match.group(1)),
        int(match.group(2)) if match.group(2) is not None else 1,
        int(match.group(3)),
        int(match.group(4)) if match.group(4) is not None else 1,
    )
    hunk = Hunk(old_start, old_count, new_start, new_count)
    header_line = i + 1
    i += 1
    old_seen = new_seen = 0
    while old_seen < old_count or new_seen < new_count:
        if i >= len(lines):
            raise PatchError(
                f"the hunk at line {header_line} of the patch ends early: its header counts "
                f"{old_count} old and {new_count} new lines, the body has {old_seen} and {new_seen}"
            )
        line = lines[i]
        if line.startswith("\\"):
            _no_newline(hunk, i)
            i += 1
            continue
        tag, text = (line[:1], line[1:]) if line else (" ", "")
        if tag == " ":
            old_seen += 1
            new_seen += 1
        elif tag == "-":
            old_seen += 1
        elif tag == "+":
            new_seen += 1
        else:
            raise PatchError(
                f"line {i + 1} of the patch: {line[:60]!r} inside the hunk at line {header_line} "
                "(hunk lines start with ' ', '-' or '+'; is its @@ count right?)"
            )
        if old_seen > old_count or new_seen > new_count:
            raise PatchError(
                f"the hunk at line {header_line} of the patch has more lines than its header "
                f"counts ({old_count} old, {new_count} new)"
            )
        hunk.lines.append((tag, text + "\n"))
        i += 1
    while i < len(lines) and lines[i].startswith("\\"):
        _no_newline(hunk, i)
        i += 1
    return hunk, i


def _no_newline(hunk: Hunk, i: int) -> None:
    """``\\ No newline at end of file``: the line before it has no line ending."""
    if not hunk.lines:
        raise PatchError(f"line {i + 1} of the patch: a '\\' marker before any hunk line")
    tag, text = hunk.lines[-1]
    hunk.lines[-1] = (tag, text.removesuffix("\n"))


def split_lines(text: str) -> list[str]:
    """``text`` as lines that keep their ``\\n`` (the last one may lack it).

    Lines end at ``\\n`` only, as in a diff (``str.splitlines`` would also split
    at ``\\r``, form feeds and Unicode separators).
    """
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def apply_hunks(original: list[str], hunks: list[Hunk], shown: str) -> tuple[list[str], list[str]]:
    """The lines after every hunk applied, and notes on hunks applied at an offset.

    ``original`` is the file as :func:`split_lines` gives it.
    """
    result: list[str] = []
    notes: list[str] = []
    position = 0
    for number, hunk in enumerate(hunks, 1):
        old = hunk.old_lines
        # "-5,0" means: insert after line 5; otherwise the hunk starts at line 5 (1-based).
        wanted = hunk.old_start if hunk.old_count == 0 else hunk.old_start - 1
        at = _locate(original, old, wanted, position)
        if at is None:
            raise PatchError(_mismatch(original, hunk, number, wanted, position, shown))
        if at != wanted:
            notes.append(
                f"hunk {number} of {shown!r} applied at line {at + 1} (offset {at - wanted:+d})"
            )
        result.extend(original[position:at])
        result.extend(hunk.new_lines)
        position = at + len(old)
    result.extend(original[position:])
    return result, notes


def _locate(lines: list[str], old: list[str], wanted: int, low: int) -> int | None:
    """Where ``old`` occurs exactly, at ``wanted`` or the nearest place at or after ``low``."""
    high = len(lines) - len(old)
    if high < low:
        return None
    if not old:
        # A hunk of added lines only has no context to check: only its stated place counts.
        return wanted if low <= wanted <= len(lines) else None
    wanted = min(max(wanted, low), high)
    for distance in range(max(wanted - low, high - wanted) + 1):
        for candidate in (wanted - distance, wanted + distance):
            if low <= candidate <= high and lines[candidate : candidate + len(old)] == old:
                return candidate
    return None


def _mismatch(lines: list[str], hunk: Hunk, number: int, wanted: int, low: int, shown: str) -> str:
    """Why hunk ``number`` does not apply: the first line that differs at its stated place."""
    old = hunk.old_lines
    head = f"hunk {number} of {shown!r} (@@ -{hunk.old_start},{hunk.old_count} @@) does not apply"
    if not old:
        return (
            f"{head}: it inserts after line {wanted}, which is not after the previous hunk "
            f"and within the file ({len(lines)} lines)"
        )
    start = max(wanted, low)
    for k, expected in enumerate(old):
        index = start + k
        if index >= len(lines):
            return (
                f"{head}: the file ends at line {len(lines)}, the hunk expects "
                f"{_show(expected)} at line {index + 1}"
            )
        if lines[index] != expected:
            hint = ""
            if lines[index].rstrip("\r\n") == expected.rstrip("\r\n"):
                hint = " (they differ only in line endings)"
            return (
                f"{head}: at line {index + 1} the file has {_show(lines[index])} where the "
                f"patch expects {_show(expected)}{hint}; its lines were not found elsewhere "
                "either; read the file again and regenerate the hunk"
            )
    return f"{head}: its lines overlap the previous hunk"


def _show(line: str, limit: int = 80) -> str:
    text = line.rstrip("\n")
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
