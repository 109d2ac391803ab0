"""read_file: pages of lines, a byte cap per call, binary and invalid UTF-8."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from koboi.errors import ToolError

pytestmark = pytest.mark.anyio

CAP = 4096  # the smallest max_read_bytes, so "larger than the cap" stays small


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


async def test_a_file_larger_than_the_cap_is_read_in_pages(
    layout: Any, make_tools_with: Any
) -> None:
    tools = make_tools_with(max_read_bytes=CAP)
    lines = [f"line {n:05d} {'x' * 40}\n" for n in range(1000)]  # ~52 KB, ~13 pages
    _write(layout.root / "big.txt", "".join(lines).encode())
    collected: list[str] = []
    offset = 0
    calls = 0
    while True:
        page = await tools("read_file", path="big.txt", offset=offset)
        calls += 1
        body, _, footer = page.partition("\n[lines ")
        assert len(body.encode()) <= CAP
        collected.append(body if body.endswith("\n") else body + "\n")
        if not footer:
            break
        found = re.search(r"call read_file again with offset=(\d+)", footer)
        assert found, footer
        remaining = re.search(r"; ([\d,]+) more lines \(([\d,]+) bytes\)", footer)
        assert remaining is not None
        next_offset = int(found.group(1))
        assert int(remaining.group(1).replace(",", "")) == 1000 - next_offset
        assert int(remaining.group(2).replace(",", "")) == sum(map(len, lines[next_offset:]))
        offset = next_offset
    assert calls >= len("".join(lines).encode()) // CAP  # it really took several pages
    assert "".join(collected) == "".join(lines)  # every line exactly once, in order


async def test_offset_and_limit_count_lines(layout: Any, tools: Any) -> None:
    _write(layout.root / "f.txt", b"a\nb\nc\nd\n")
    assert await tools("read_file", path="f.txt") == "a\nb\nc\nd\n"
    page = await tools("read_file", path="f.txt", offset=1, limit=2)
    assert page.startswith("b\nc\n")
    assert "1 more line (2 bytes) not shown: call read_file again with offset=3" in page
    assert await tools("read_file", path="f.txt", offset=3) == "d\n"


async def test_a_last_line_without_newline_counts(layout: Any, tools: Any) -> None:
    _write(layout.root / "f.txt", b"a\nb\nc")
    assert await tools("read_file", path="f.txt", offset=2) == "c"
    assert "1 more line" in await tools("read_file", path="f.txt", limit=2)
    with pytest.raises(ToolError, match=r"offset 3 is past the end of 'f\.txt', which has 3 lines"):
        await tools("read_file", path="f.txt", offset=3)


async def test_empty_file_and_offset_past_the_end(layout: Any, tools: Any) -> None:
    _write(layout.root / "empty.txt", b"")
    assert "empty" in await tools("read_file", path="empty.txt")
    with pytest.raises(ToolError, match="past the end"):
        await tools("read_file", path="notes.txt", offset=5)


async def test_binary_files_are_refused_with_a_clear_note(layout: Any, tools: Any) -> None:
    _write(layout.root / "image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    with pytest.raises(ToolError, match="binary file"):
        await tools("read_file", path="image.png")


async def test_invalid_utf8_is_replaced_and_said(layout: Any, tools: Any) -> None:
    _write(layout.root / "latin1.txt", "café\n".encode("latin-1"))
    page = await tools("read_file", path="latin1.txt")
    assert page.startswith("caf\ufffd\n")
    assert "not valid UTF-8" in page


async def test_a_line_longer_than_a_page_is_cut_with_a_note(
    layout: Any, make_tools_with: Any
) -> None:
    tools = make_tools_with(max_read_bytes=CAP)
    long_line = "é" * CAP  # 2 bytes each: the cut must not split a character
    _write(layout.root / "min.js", f"{long_line}\nnext\n".encode())
    page = await tools("read_file", path="min.js")
    body = page.split("\n[", 1)[0]
    assert "\ufffd" not in body
    assert len(body.encode()) <= CAP
    assert "line 1 is longer than one page" in page
    assert "offset=1" in page
    assert await tools("read_file", path="min.js", offset=1) == "next\n"


async def test_directories_and_fifos_are_not_read(layout: Any, tools: Any) -> None:
    with pytest.raises(ToolError, match="is a directory"):
        await tools("read_file", path="sub")
    os.mkfifo(layout.root / "pipe")
    # Opened non-blocking: a FIFO without a writer cannot hang the call.
    with pytest.raises(ToolError, match="not a regular file"):
        await tools("read_file", path="pipe")
    with pytest.raises(ToolError, match="does not exist"):
        await tools("read_file", path="missing.txt")


async def test_crlf_and_unicode_are_kept(layout: Any, tools: Any) -> None:
    _write(layout.root / "win.txt", "un\r\ndeux\u2028trois\r\n".encode())
    assert await tools("read_file", path="win.txt") == "un\r\ndeux\u2028trois\r\n"
    page = await tools("read_file", path="win.txt", limit=1)
    assert page.startswith("un\r\n") and "offset=1" in page
