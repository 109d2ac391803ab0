"""Walking directories by descriptor: glob patterns and regex search.

Every directory is entered with ``openat(parent_fd, name, O_DIRECTORY |
O_NOFOLLOW)`` and listed with ``scandir`` on that descriptor; symlinks are
reported by name (glob) or skipped (grep) but never followed, so a walk
cannot leave the directory it started in, even if links are swapped in while
it runs. Work is bounded: a cap on results, on entries scanned, on depth, on
bytes read and on time, and the result says which cap stopped it.
"""

from __future__ import annotations

import io
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from koboi_confine.paths import Identity, link_allowed
from koboi_tools_fs.fds import closing_fd, open_child_dir, open_child_file
from koboi_tools_fs.reading import SNIFF_BYTES, is_binary

#: Entries looked at in one call, across all directories.
MAX_SCANNED = 200_000
#: Directory levels below the starting directory.
MAX_DEPTH = 64
#: Bytes of file content grep reads in one call.
MAX_GREP_BYTES = 256 << 20
#: Seconds one grep or glob call may spend.
MAX_SECONDS = 20.0
#: A line longer than this is searched in its first part only.
MAX_LINE_SCAN = 1 << 20
#: Characters of a matching line shown in a result.
MAX_LINE_CHARS = 300


@dataclass
class Budget:
    """What is left to spend, and which limit (if any) stopped the walk."""

    max_results: int
    scanned: int = 0
    read: int = 0
    deadline: float = field(default_factory=lambda: time.monotonic() + MAX_SECONDS)
    stopped: str | None = None
    too_deep: int = 0

    def scan(self) -> bool:
        """Count one entry; False once a limit is reached."""
        if self.stopped is not None:
            return False
        self.scanned += 1
        if self.scanned > MAX_SCANNED:
            self.stopped = f"stopped after scanning {MAX_SCANNED:,} entries"
        elif self.scanned % 256 == 0 and time.monotonic() > self.deadline:
            self.stopped = f"stopped after {MAX_SECONDS:.0f} seconds"
        return self.stopped is None


@dataclass(frozen=True)
class Entry:
    name: str
    is_dir: bool  # a real directory (never a symlink to one)
    is_file: bool  # a regular file (never a symlink to one)


def entries(dir_fd: int) -> list[Entry]:
    """The entries of the directory ``dir_fd``, sorted by name, symlinks not followed."""
    found: list[Entry] = []
    with os.scandir(dir_fd) as listing:
        for item in listing:
            try:
                is_dir = item.is_dir(follow_symlinks=False)
                is_file = item.is_file(follow_symlinks=False)
            except OSError:
                continue  # removed while we looked
            found.append(Entry(item.name, is_dir, is_file))
    found.sort(key=lambda e: e.name)
    return found


# -- glob ----------------------------------------------------------------------------


def glob(dir_fd: int, prefix: list[str], pattern: list[str], budget: Budget) -> list[str]:
    """Paths beneath ``dir_fd`` matching ``pattern`` (components; ``**`` = any depth).

    Results are ``prefix``-relative paths joined with ``/``, directories with a
    trailing ``/``, in a stable order, at most ``budget.max_results`` of them
    (one more is looked for, so the caller can tell the list was capped).
    """
    results: dict[str, None] = {}  # ordered, without duplicates ("**/**" finds a path twice)
    _glob(dir_fd, prefix, pattern, budget, results, 0)
    return list(results)


def _glob(
    dir_fd: int,
    prefix: list[str],
    pattern: list[str],
    budget: Budget,
    results: dict[str, None],
    depth: int,
) -> None:
    if len(results) > budget.max_results or budget.stopped is not None:
        return
    listing = entries(dir_fd)
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        if rest:
            _match(dir_fd, prefix, listing, rest, budget, results, depth)  # zero directories
        else:
            for entry in listing:
                if not budget.scan():
                    return
                _add(results, [*prefix, entry.name], entry.is_dir)
        for entry in listing:
            if entry.is_dir and _may_descend(budget, depth):
                _enter(dir_fd, entry.name, prefix, pattern, budget, results, depth)
    else:
        _match(dir_fd, prefix, listing, pattern, budget, results, depth)


def _match(
    dir_fd: int,
    prefix: list[str],
    listing: list[Entry],
    pattern: list[str],
    budget: Budget,
    results: dict[str, None],
    depth: int,
) -> None:
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        _glob(dir_fd, prefix, pattern, budget, results, depth)
        return
    for entry in listing:
        if len(results) > budget.max_results or not budget.scan():
            return
        if not fnmatchcase(entry.name, head):
            continue
        if not rest:
            _add(results, [*prefix, entry.name], entry.is_dir)
        elif entry.is_dir and _may_descend(budget, depth):
            _enter(dir_fd, entry.name, prefix, rest, budget, results, depth)


def _enter(
    dir_fd: int,
    name: str,
    prefix: list[str],
    pattern: list[str],
    budget: Budget,
    results: dict[str, None],
    depth: int,
) -> None:
    try:
        child = open_child_dir(dir_fd, name)
    except OSError:
        return  # swapped for a symlink, removed, or unreadable: not entered
    with closing_fd(child):
        _glob(child, [*prefix, name], pattern, budget, results, depth + 1)


def _may_descend(budget: Budget, depth: int) -> bool:
    if depth + 1 > MAX_DEPTH:
        budget.too_deep += 1
        return False
    return True


def _add(results: dict[str, None], parts: list[str], is_dir: bool) -> None:
    results["/".join(parts) + ("/" if is_dir else "")] = None


# -- grep ----------------------------------------------------------------------------


@dataclass
class GrepReport:
    """Matches as ``path:line: text``, with what was skipped along the way."""

    matches: list[str] = field(default_factory=list)
    files: int = 0
    binary: int = 0
    long_lines: int = 0
    #: Hard-linked files skipped: the session could not have opened them as itself.
    linked: int = 0


def grep_tree(
    dir_fd: int,
    prefix: list[str],
    regex: re.Pattern[str],
    include: str | None,
    budget: Budget,
    report: GrepReport,
    identity: Identity,
    depth: int = 0,
) -> None:
    """Search every regular file beneath ``dir_fd`` (symlinks skipped) whose name matches
    ``include``; a hard link ``identity`` could not open is skipped and counted."""
    for entry in entries(dir_fd):
        if len(report.matches) > budget.max_results or not budget.scan():
            return
        if entry.is_dir:
            if not _may_descend(budget, depth):
                continue
            try:
                child = open_child_dir(dir_fd, entry.name)
            except OSError:
                continue
            with closing_fd(child):
                grep_tree(
                    child,
                    [*prefix, entry.name],
                    regex,
                    include,
                    budget,
                    report,
                    identity,
                    depth + 1,
                )
        elif entry.is_file and (include is None or fnmatchcase(entry.name, include)):
            try:
                fd = open_child_file(dir_fd, entry.name)
            except OSError:
                continue
            with closing_fd(fd):
                if not link_allowed(os.fstat(fd), identity):
                    report.linked += 1
                    continue
                grep_file(fd, "/".join([*prefix, entry.name]), regex, budget, report)


def grep_file(
    fd: int, shown: str, regex: re.Pattern[str], budget: Budget, report: GrepReport
) -> None:
    """Search one open file; binary files (a NUL byte near the start) are skipped."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return
    with io.BufferedReader(io.FileIO(os.dup(fd), "rb"), buffer_size=1 << 16) as handle:
        if is_binary(handle.read(SNIFF_BYTES)):
            report.binary += 1
            return
        handle.seek(0)
        report.files += 1
        for number, raw in enumerate(_lines(handle, report), 1):
            budget.read += len(raw)
            if budget.read > MAX_GREP_BYTES:
                budget.stopped = f"stopped after reading {MAX_GREP_BYTES >> 20} MiB"
                return
            if number % 1024 == 0 and time.monotonic() > budget.deadline:
                budget.stopped = f"stopped after {MAX_SECONDS:.0f} seconds"
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            found = regex.search(line)
            if found is None:
                continue
            report.matches.append(f"{shown}:{number}: {clip(line, found.start())}")
            if len(report.matches) > budget.max_results:
                return


def _lines(handle: io.BufferedReader[io.FileIO], report: GrepReport) -> Iterator[bytes]:
    """Each line, at most :data:`MAX_LINE_SCAN` bytes of it (the rest is read and dropped)."""
    readline = handle.readline
    while True:
        line = readline(MAX_LINE_SCAN)
        if not line:
            return
        if len(line) == MAX_LINE_SCAN and not line.endswith(b"\n"):
            report.long_lines += 1
            while True:
                rest = readline(MAX_LINE_SCAN)
                if not rest or rest.endswith(b"\n"):
                    break
        yield line


def clip(line: str, start: int) -> str:
    """At most :data:`MAX_LINE_CHARS` characters of ``line``, around the match at ``start``."""
    if len(line) <= MAX_LINE_CHARS:
        return line
    begin = max(0, min(start - MAX_LINE_CHARS // 3, len(line) - MAX_LINE_CHARS))
    text = line[begin : begin + MAX_LINE_CHARS]
    left = "…" if begin > 0 else ""
    right = "…" if begin + MAX_LINE_CHARS < len(line) else ""
    return f"{left}{text}{right} [line of {len(line):,} characters cut]"
