"""delete_file (files only, unless asked for an empty directory) and move_file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koboi.errors import ToolError
from koboi_confine.paths import PathRefused

pytestmark = pytest.mark.anyio


async def test_delete_a_file(layout: Any, tools: Any) -> None:
    assert await tools("delete_file", path="notes.txt") == "deleted file notes.txt"
    assert not (layout.root / "notes.txt").exists()
    with pytest.raises(ToolError, match="does not exist"):
        await tools("delete_file", path="notes.txt")


async def test_deleting_a_directory_is_refused(layout: Any, tools: Any) -> None:
    with pytest.raises(ToolError, match=r"is a directory.*empty_dir"):
        await tools("delete_file", path="sub")
    assert (layout.root / "sub" / "deep.txt").exists()
    with pytest.raises(ToolError, match="not empty"):
        await tools("delete_file", path="sub", empty_dir=True)
    assert (layout.root / "sub" / "deep.txt").exists()
    # Control: an empty directory goes with the explicit flag.
    (layout.root / "empty").mkdir()
    assert "empty directory" in await tools("delete_file", path="empty", empty_dir=True)
    assert not (layout.root / "empty").exists()


async def test_delete_a_symlink_removes_the_link_only(layout: Any, tools: Any) -> None:
    (layout.root / "out").symlink_to(layout.top / "secret.txt")
    assert await tools("delete_file", path="out") == "deleted the symlink out"
    assert (layout.top / "secret.txt").exists()


async def test_move_and_rename(layout: Any, tools: Any) -> None:
    assert await tools("move_file", source="notes.txt", destination="a/b/n.txt") == (
        "moved notes.txt to a/b/n.txt"
    )
    assert (layout.root / "a" / "b" / "n.txt").read_text() == "hello notes\n"
    assert not (layout.root / "notes.txt").exists()
    await tools("move_file", source="sub", destination="renamed")  # directories too
    assert (layout.root / "renamed" / "deep.txt").exists()


async def test_move_does_not_clobber_unless_asked(layout: Any, tools: Any) -> None:
    (layout.root / "other.txt").write_text("other")
    with pytest.raises(ToolError, match="already exists; set overwrite=true"):
        await tools("move_file", source="notes.txt", destination="other.txt")
    assert (layout.root / "other.txt").read_text() == "other"
    result = await tools("move_file", source="notes.txt", destination="other.txt", overwrite=True)
    assert "replaced" in result
    assert (layout.root / "other.txt").read_text() == "hello notes\n"
    with pytest.raises(ToolError, match="existing directory"):
        await tools("move_file", source="other.txt", destination="sub", overwrite=True)
    with pytest.raises(ToolError, match="itself or inside it"):
        await tools("move_file", source="sub", destination="sub/inner")
    with pytest.raises(ToolError, match="does not exist"):
        await tools("move_file", source="ghost.txt", destination="x.txt")
    assert not (layout.root / "x.txt").exists()


@pytest.mark.parametrize("outside", ["../moved.txt", "../s1_evil/moved.txt", "/tmp/moved.txt"])
async def test_move_across_the_boundary_is_refused(layout: Any, tools: Any, outside: str) -> None:
    with pytest.raises(PathRefused):
        await tools("move_file", source="notes.txt", destination=outside)
    with pytest.raises(PathRefused):
        await tools("move_file", source=outside, destination="in.txt")
    assert (layout.root / "notes.txt").exists()
    target = Path(outside) if outside.startswith("/") else layout.root / outside
    assert not target.exists()
    (layout.root / "door").symlink_to(layout.top)
    with pytest.raises(PathRefused):
        await tools("move_file", source="notes.txt", destination="door/moved.txt")
    assert not (layout.top / "moved.txt").exists()
    # Control: the same move inside works.
    await tools("move_file", source="notes.txt", destination="moved.txt")
    assert (layout.root / "moved.txt").exists()
