"""list_dir, glob and grep: what they find, and their caps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koboi.errors import ToolError
from koboi_tools_fs import searching

pytestmark = pytest.mark.anyio


@pytest.fixture
def tree(layout: Any) -> Path:
    root: Path = layout.root
    for rel in ("src/a.py", "src/b.py", "src/pkg/c.py", "src/pkg/data.json", "docs/readme.md"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {rel}\nimport os\n")
    return root


async def test_list_dir(tree: Path, tools: Any) -> None:
    (tree / "link").symlink_to("src")
    listing = await tools("list_dir")
    lines = listing.splitlines()
    assert lines[0] == ".: 5 entries"
    assert "src/" in lines and "docs/" in lines and "sub/" in lines
    assert "notes.txt  (12 bytes)" in lines
    assert "link -> src  (symlink, not followed by these tools)" in lines
    assert (await tools("list_dir", path="src/pkg")).splitlines()[1:] == [
        "c.py  (25 bytes)",
        "data.json  (30 bytes)",
    ]
    with pytest.raises(ToolError, match="not a directory"):
        await tools("list_dir", path="notes.txt")


async def test_list_dir_cap(tree: Path, make_tools_with: Any) -> None:
    tools = make_tools_with(max_results=3)
    for n in range(10):
        (tree / "many" / f"f{n}").parent.mkdir(exist_ok=True)
        (tree / "many" / f"f{n}").write_text("")
    listing = await tools("list_dir", path="many")
    assert listing.splitlines()[0] == "many: 10 entries"
    assert listing.splitlines()[1:4] == ["f0  (0 bytes)", "f1  (0 bytes)", "f2  (0 bytes)"]
    assert "showing the first 3 of 10 entries" in listing


async def test_glob_patterns(tree: Path, tools: Any) -> None:
    assert (await tools("glob", pattern="src/*.py")).splitlines() == ["src/a.py", "src/b.py"]
    assert (await tools("glob", pattern="**/*.py")).splitlines() == [
        "src/a.py",
        "src/b.py",
        "src/pkg/c.py",
    ]
    assert (await tools("glob", pattern="src/**")).splitlines() == [
        "src/a.py",
        "src/b.py",
        "src/pkg/",
        "src/pkg/c.py",
        "src/pkg/data.json",
    ]
    assert (await tools("glob", pattern="*/pkg/[cd]*")).splitlines() == [
        "src/pkg/c.py",
        "src/pkg/data.json",
    ]
    assert await tools("glob", pattern="docs/readme.md") == "docs/readme.md"
    assert await tools("glob", pattern="nothing/**/*.py") == "no paths match 'nothing/**/*.py'"
    assert await tools("glob", pattern="notes.txt/*") == "no paths match 'notes.txt/*'"


async def test_glob_cap(tree: Path, make_tools_with: Any) -> None:
    tools = make_tools_with(max_results=2)
    found = (await tools("glob", pattern="**/*.py")).splitlines()
    assert found == ["src/a.py", "src/b.py", "[capped at 2 paths; narrow the pattern]"]
    # Control: with room for all of them, nothing is said about a cap.
    assert "capped" not in await make_tools_with(max_results=3)("glob", pattern="**/*.py")


async def test_grep_finds_lines(tree: Path, tools: Any) -> None:
    result = await tools("grep", pattern=r"^# src/.*\.py$")
    assert result.splitlines() == [
        "src/a.py:1: # src/a.py",
        "src/b.py:1: # src/b.py",
        "src/pkg/c.py:1: # src/pkg/c.py",
    ]
    assert (
        await tools("grep", pattern="IMPORT", path="src/pkg", ignore_case=True)
    ).splitlines() == [
        "src/pkg/c.py:2: import os",
        "src/pkg/data.json:2: import os",
    ]
    only_json = await tools("grep", pattern="import", include="*.json")
    assert only_json == "src/pkg/data.json:2: import os"
    assert await tools("grep", pattern="import", path="docs/readme.md") == (
        "docs/readme.md:2: import os"
    )
    assert "no matches for 'zebra'" in await tools("grep", pattern="zebra")


async def test_grep_caps_matches_and_says_so(tree: Path, make_tools_with: Any) -> None:
    tools = make_tools_with(max_results=2)
    result = (await tools("grep", pattern="import")).splitlines()
    assert len(result) == 3
    assert result[2] == "[capped at 2 matches; narrow the pattern, path or include]"
    assert "capped" not in await make_tools_with(max_results=10)("grep", pattern="import")


async def test_grep_cuts_long_lines_around_the_match(tree: Path, tools: Any) -> None:
    (tree / "min.js").write_text("a" * 5000 + "NEEDLE" + "b" * 5000 + "\n")
    (line,) = (await tools("grep", pattern="NEEDLE")).splitlines()
    assert line.startswith("min.js:1: …")
    assert "NEEDLE" in line
    assert len(line) < searching.MAX_LINE_CHARS + 80
    assert "line of 10,006 characters cut" in line


async def test_grep_skips_binary_files_and_says_so(tree: Path, tools: Any) -> None:
    (tree / "blob.bin").write_bytes(b"import\x00\x01\x02")
    result = await tools("grep", pattern="import", path=".")
    assert "blob.bin" not in result
    assert "[1 binary files skipped]" in result
    assert "src/a.py:2: import os" in result  # control: text files are searched


async def test_grep_refuses_bad_patterns(tree: Path, tools: Any) -> None:
    with pytest.raises(ToolError, match="invalid regular expression"):
        await tools("grep", pattern="(unclosed")


async def test_walk_budget_stops_and_says_so(
    tree: Path, tools: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(searching, "MAX_SCANNED", 3)
    assert "stopped after scanning 3 entries" in await tools("glob", pattern="**/*")
    assert "stopped after scanning 3 entries" in await tools("grep", pattern="import")
