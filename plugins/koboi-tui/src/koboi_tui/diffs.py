"""The diff an approval shows for a call that edits a file.

Recognised by the shape of the arguments, not by the tool's name (a tool may be
offered under a namespace): ``path`` + ``old_text`` + ``new_text`` is an edit,
``path`` + ``content`` a whole-file write, ``patch`` a unified diff already. The
file's current text is read (read-only, at most :data:`MAX_READ` bytes) from the
directory the session's tools work in, when it is there, so the diff shows what
the call would change; otherwise the diff is of the arguments alone.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MAX_READ = 256 * 1024
MAX_DIFF_LINES = 200


def edit_diff(arguments: Mapping[str, Any], workdir: Path | None) -> str | None:
    """A unified diff of what the call would change, or None when it edits no file."""
    patch = arguments.get("patch")
    if isinstance(patch, str) and "path" not in arguments:
        return _cap(patch.rstrip("\n").splitlines())
    path = arguments.get("path")
    if not isinstance(path, str):
        return None
    current = _current_text(path, workdir)
    old_text, new_text = arguments.get("old_text"), arguments.get("new_text")
    if isinstance(old_text, str) and isinstance(new_text, str):
        if current is not None and old_text in current:
            if arguments.get("replace_all"):
                after = current.replace(old_text, new_text)
            else:
                after = current.replace(old_text, new_text, 1)
            return _unified(current, after, path)
        return _unified(old_text, new_text, path)
    content = arguments.get("content")
    if isinstance(content, str):
        return _unified(current or "", content, path, new_file=current is None)
    return None


def _unified(before: str, after: str, path: str, *, new_file: bool = False) -> str:
    lines = difflib.unified_diff(
        before.splitlines(),
        after.splitlines(),
        fromfile="/dev/null" if new_file else f"a/{path}",
        tofile=f"b/{path}",
        lineterm="",
    )
    return _cap(list(lines))


def _cap(lines: list[str]) -> str:
    if len(lines) > MAX_DIFF_LINES:
        hidden = len(lines) - MAX_DIFF_LINES
        lines = [*lines[:MAX_DIFF_LINES], f"… ({hidden} more lines)"]
    return "\n".join(lines)


def _current_text(path: str, workdir: Path | None) -> str | None:
    """The file's text, when it is a regular file beneath ``workdir`` (else None)."""
    base = (workdir or Path.cwd()).resolve()
    try:
        target = (base / path).resolve()
        if not target.is_relative_to(base) or not target.is_file():
            return None
        with target.open("rb") as handle:
            data = handle.read(MAX_READ + 1)
    except (OSError, ValueError):
        return None
    if len(data) > MAX_READ or b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")
