"""write_file (atomic, capped, keeps mode) and edit_file (exact-match replacement)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from koboi.errors import ToolError

pytestmark = pytest.mark.anyio


def _text(path: Path) -> str:
    return path.read_text()


def _hidden(root: Path) -> list[str]:
    return [p.name for p in root.rglob(".*koboi-tmp")]


# -- write_file ----------------------------------------------------------------------


async def test_write_creates_and_replaces(layout: Any, tools: Any) -> None:
    assert "new file" in await tools("write_file", path="a.txt", content="one")
    assert _text(layout.root / "a.txt") == "one"
    assert "replaced" in await tools("write_file", path="a.txt", content="two ✓")
    assert _text(layout.root / "a.txt") == "two ✓"
    assert not _hidden(layout.root)  # no temp file left behind


async def test_write_is_idempotent(layout: Any, tools: Any) -> None:
    for _ in range(2):
        await tools("write_file", path="x/y.txt", content="same")
    assert _text(layout.root / "x" / "y.txt") == "same"
    assert sorted(p.name for p in (layout.root / "x").iterdir()) == ["y.txt"]


async def test_write_keeps_the_mode_of_a_replaced_file(layout: Any, tools: Any) -> None:
    script = layout.root / "run.sh"
    script.write_text("old")
    script.chmod(0o750 | stat.S_ISUID)
    await tools("write_file", path="run.sh", content="new")
    assert stat.S_IMODE(script.stat().st_mode) == 0o750  # never setuid
    assert _text(script) == "new"


async def test_write_without_create_dirs(layout: Any, tools: Any) -> None:
    with pytest.raises(ToolError, match="does not exist"):
        await tools("write_file", path="none/a.txt", content="x", create_dirs=False)
    assert not (layout.root / "none").exists()
    await tools("write_file", path="sub/a.txt", content="x", create_dirs=False)  # control


async def test_write_size_cap(layout: Any, make_tools_with: Any) -> None:
    tools = make_tools_with(max_write_bytes=10)
    with pytest.raises(ToolError, match="limit is 10 bytes"):
        await tools("write_file", path="big.txt", content="x" * 11)
    assert not (layout.root / "big.txt").exists()
    await tools("write_file", path="ok.txt", content="x" * 10)  # control


async def test_write_refuses_directories(layout: Any, tools: Any) -> None:
    with pytest.raises(ToolError, match="is a directory"):
        await tools("write_file", path="sub", content="x")
    assert (layout.root / "sub").is_dir()


async def test_write_is_atomic_for_readers(layout: Any, tools: Any) -> None:
    # Readers holding the old file keep the old content; the name moves to the new inode.
    path = layout.root / "a.txt"
    path.write_text("old")
    fd = os.open(path, os.O_RDONLY)
    try:
        inode = os.fstat(fd).st_ino
        await tools("write_file", path="a.txt", content="new")
        assert os.read(fd, 100) == b"old"
    finally:
        os.close(fd)
    assert path.stat().st_ino != inode
    assert _text(path) == "new"


# -- edit_file -----------------------------------------------------------------------


async def test_edit_replaces_exactly_one_occurrence(layout: Any, tools: Any) -> None:
    (layout.root / "code.py").write_text("a = 1\nb = 2\n")
    result = await tools("edit_file", path="code.py", old_text="b = 2", new_text="b = 3")
    assert result == "replaced 1 occurrence in code.py"
    assert _text(layout.root / "code.py") == "a = 1\nb = 3\n"


async def test_edit_with_no_match_is_a_clear_error(layout: Any, tools: Any) -> None:
    (layout.root / "code.py").write_text("def f():\n    return 1\n")
    with pytest.raises(ToolError, match=r"old_text was not found in 'code\.py'"):
        await tools("edit_file", path="code.py", old_text="return 2", new_text="x")
    with pytest.raises(ToolError, match="different whitespace"):
        await tools("edit_file", path="code.py", old_text="def f():\n  return 1", new_text="x")
    assert _text(layout.root / "code.py") == "def f():\n    return 1\n"


async def test_edit_with_two_matches_needs_replace_all(layout: Any, tools: Any) -> None:
    path = layout.root / "code.py"
    path.write_text("x = 1\ny = 1\n")
    with pytest.raises(ToolError, match=r"occurs 2 times in 'code\.py'.*replace_all"):
        await tools("edit_file", path="code.py", old_text="= 1", new_text="= 2")
    assert _text(path) == "x = 1\ny = 1\n"  # unchanged
    result = await tools(
        "edit_file", path="code.py", old_text="= 1", new_text="= 2", replace_all=True
    )
    assert result == "replaced 2 occurrences in code.py"
    assert _text(path) == "x = 2\ny = 2\n"


async def test_edit_refuses_pointless_and_non_text_edits(layout: Any, tools: Any) -> None:
    with pytest.raises(ToolError, match="old_text is empty"):
        await tools("edit_file", path="notes.txt", old_text="", new_text="x")
    with pytest.raises(ToolError, match="the same"):
        await tools("edit_file", path="notes.txt", old_text="hello", new_text="hello")
    (layout.root / "latin1.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(ToolError, match="not valid UTF-8"):
        await tools("edit_file", path="latin1.txt", old_text="caf", new_text="tea")
    with pytest.raises(ToolError, match="does not exist"):
        await tools("edit_file", path="nope.txt", old_text="a", new_text="b")


async def test_edit_says_when_line_endings_differ(layout: Any, tools: Any) -> None:
    (layout.root / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    with pytest.raises(ToolError, match="CRLF"):
        await tools("edit_file", path="win.txt", old_text="one\ntwo", new_text="x")
    await tools("edit_file", path="win.txt", old_text="one\r\ntwo", new_text="x")
    assert (layout.root / "win.txt").read_bytes() == b"x\r\n"


async def test_edit_can_delete_text_and_respects_the_size_cap(
    layout: Any, make_tools_with: Any
) -> None:
    tools = make_tools_with(max_write_bytes=20)
    path = layout.root / "f.txt"
    path.write_text("keep DROP keep")
    await tools("edit_file", path="f.txt", old_text=" DROP", new_text="")
    assert _text(path) == "keep keep"
    with pytest.raises(ToolError, match="limit is 20 bytes"):
        await tools("edit_file", path="f.txt", old_text="keep", new_text="k" * 30, replace_all=True)
    assert _text(path) == "keep keep"
