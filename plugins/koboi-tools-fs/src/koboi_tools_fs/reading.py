"""One page of a text file, counted in lines, never more than a byte cap.

Pages are counted in **lines**: ``offset`` is how many lines to skip (0 =
start at the first line) and ``limit`` how many to show at most. A page
also stops before it would exceed the byte cap, so a file of any size is
read in bounded pieces; a footer says how many lines (and bytes) remain and
which ``offset`` continues. A single line longer than a whole page is shown
cut at the cap, with a note, and the next page starts at the next line.
"""

from __future__ import annotations

import io
import os

from koboi.errors import ToolError

#: Bytes looked at to tell a binary file from text (as git and grep do: a NUL byte).
SNIFF_BYTES = 8192
_CHUNK = 1 << 20
#: Beyond this many bytes after a page, remaining lines are estimated, not counted.
_COUNT_LIMIT = 64 << 20


def is_binary(head: bytes) -> bool:
    """True when ``head`` (the start of a file) holds a NUL byte."""
    return b"\0" in head


def read_page(fd: int, shown: str, *, offset: int, limit: int | None, cap: int) -> str:
    """The page of the open regular file ``fd`` that starts after ``offset`` lines."""
    size = os.fstat(fd).st_size
    with io.BufferedReader(io.FileIO(os.dup(fd), "rb"), buffer_size=_CHUNK) as handle:
        head = handle.read(SNIFF_BYTES)
        if is_binary(head):
            raise ToolError(
                f"{shown!r} looks like a binary file ({size:,} bytes, it contains NUL bytes); "
                "read_file shows text files only"
            )
        if not head:
            return f"[{shown} is empty]"
        handle.seek(0)
        skipped = _skip_lines(handle, offset)
        if skipped < offset or not handle.peek(1):
            raise ToolError(
                f"offset {offset} is past the end of {shown!r}, which has {skipped} line"
                f"{'s' if skipped != 1 else ''}"
            )
        lines, cut = _take(handle, limit, cap)
        start = handle.tell()
        more_lines, exact = _count_lines(handle)
        more_bytes = max(size - start, 0)
    body = b"".join(lines)
    try:
        text = body.decode("utf-8")
        replaced = False
    except UnicodeDecodeError:
        text = body.decode("utf-8", "replace")
        replaced = True
    notes: list[str] = []
    if cut is not None:
        notes.append(
            f"line {offset + cut + 1} is longer than one page; only its first {cap:,} bytes "
            "are shown"
        )
    if replaced:
        notes.append("bytes that are not valid UTF-8 are shown as U+FFFD")
    if more_lines:
        count = f"{more_lines:,}" if exact else f"more than {more_lines:,}"
        shown_to = offset + len(lines)
        notes.append(
            f"lines {offset + 1}-{shown_to} shown; {count} more line{'s' if more_lines != 1 else ''}"
            f" ({more_bytes:,} bytes) not shown: call read_file again with offset={shown_to}"
        )
    if notes:
        if not text.endswith("\n"):
            text += "\n"
        text += "".join(f"[{note}]\n" for note in notes)
    return text


def _skip_lines(handle: io.BufferedReader[io.FileIO], offset: int) -> int:
    """Move past ``offset`` lines (or to the end); return how many lines were passed."""
    seen = 0
    position = handle.tell()
    last = b""
    while seen < offset:
        chunk = handle.read(_CHUNK)
        if not chunk:
            # At the end: a last line without a newline is a line too.
            return seen + 1 if last and last != b"\n" else seen
        newlines = chunk.count(b"\n")
        if seen + newlines < offset:
            seen += newlines
            position += len(chunk)
            last = chunk[-1:]
            continue
        index = -1
        for _ in range(offset - seen):
            index = chunk.index(b"\n", index + 1)
        handle.seek(position + index + 1)
        return offset
    return seen


def _take(
    handle: io.BufferedReader[io.FileIO], limit: int | None, cap: int
) -> tuple[list[bytes], int | None]:
    """Lines from here, until ``limit`` lines or ``cap`` bytes; (lines, index of a cut line)."""
    lines: list[bytes] = []
    used = 0
    cut: int | None = None
    while limit is None or len(lines) < limit:
        before = handle.tell()
        line = handle.readline(cap + 1)
        if not line:
            break
        if used + len(line) > cap:
            if lines:
                handle.seek(before)  # the next page starts with this line
                break
            # One line longer than a whole page: show its start, then skip the rest of it.
            line = _cut_at_character(line[:cap])
            cut = 0
            _skip_rest_of_line(handle)
            lines.append(line)
            break
        lines.append(line)
        used += len(line)
    return lines, cut


def _cut_at_character(data: bytes) -> bytes:
    """``data`` without a UTF-8 sequence cut in half at its end."""
    end = len(data)
    back = 0
    while back < 4 and end - back - 1 >= 0 and data[end - back - 1] & 0xC0 == 0x80:
        back += 1
    if back < 4 and end - back - 1 >= 0 and data[end - back - 1] >= 0xC0:
        lead = data[end - back - 1]
        need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        if back + 1 < need:
            return data[: end - back - 1]
    return data


def _skip_rest_of_line(handle: io.BufferedReader[io.FileIO]) -> None:
    while True:
        chunk = handle.readline(_CHUNK)
        if not chunk or chunk.endswith(b"\n"):
            return


def _count_lines(handle: io.BufferedReader[io.FileIO]) -> tuple[int, bool]:
    """Lines from here to the end; (count, exact). Stops counting after a bounded scan."""
    count = 0
    scanned = 0
    last = b""
    while chunk := handle.read(_CHUNK):
        count += chunk.count(b"\n")
        scanned += len(chunk)
        last = chunk[-1:]
        if scanned >= _COUNT_LIMIT:
            return count, False
    if last and last != b"\n":
        count += 1  # a last line without a newline is a line too
    return count, True
