"""Every tool that takes a path stays inside the working directory.

Each refusal has its control: a plain ``open()`` of the same path reaches the
outside file, so "refused" means the guard worked, not that the path was
wrong; and the same tool succeeds on a path inside. Both ways
``open_inside`` resolves paths are tested (``resolution`` fixture).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from koboi.errors import ToolError
from koboi_confine.paths import PathRefused

pytestmark = pytest.mark.anyio

SECRET = "outside secret"


def _patch_for(path: str) -> str:
    return f"--- {path}\n+++ {path}\n@@ -1 +1 @@\n-{SECRET}\n+pwned\n"


#: tool name -> arguments that aim the tool at ``path``
AIMS: dict[str, Callable[[str], dict[str, Any]]] = {
    "read_file": lambda p: {"path": p},
    "write_file": lambda p: {"path": p, "content": "pwned"},
    "edit_file": lambda p: {"path": p, "old_text": SECRET, "new_text": "pwned"},
    "apply_patch": lambda p: {"patch": _patch_for(p)},
    "list_dir": lambda p: {"path": p},
    "glob": lambda p: {"pattern": p},
    "grep": lambda p: {"pattern": "secret", "path": p},
    "delete_file": lambda p: {"path": p},
    "move_file:source": lambda p: {"source": p, "destination": "moved.txt"},
    "move_file:destination": lambda p: {
        "source": "notes.txt",
        "destination": p,
        "overwrite": True,
    },
}

#: tool name -> arguments for the positive control inside the working directory
INSIDE: dict[str, dict[str, Any]] = {
    "read_file": {"path": "notes.txt"},
    "write_file": {"path": "sub/new.txt", "content": "fine"},
    "edit_file": {"path": "notes.txt", "old_text": "hello", "new_text": "bye"},
    "apply_patch": {"patch": "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-hello notes\n+bye\n"},
    "list_dir": {"path": "sub"},
    "glob": {"pattern": "sub/*.txt"},
    "grep": {"pattern": "deep", "path": "sub"},
    "delete_file": {"path": "sub/deep.txt"},
    "move_file:source": {"source": "sub/deep.txt", "destination": "moved.txt"},
    "move_file:destination": {"source": "notes.txt", "destination": "sub/notes.txt"},
}


def _ways_out(layout: Any) -> dict[str, str]:
    """Each way out, as a path relative to (or absolute beside) the working directory."""
    root, top = layout.root, layout.top
    (root / "link.txt").symlink_to(top / "secret.txt")
    (root / "dirlink").symlink_to(top)
    (root / "escape").symlink_to("/proc/self/root")
    return {
        "dot-dot": "../../secret.txt",
        "dot-dot-inside-first": "sub/../../../secret.txt",
        "absolute-outside": str(top / "secret.txt"),
        "prefix-confusion-absolute": str(layout.evil / "loot.txt"),
        "prefix-confusion-relative": "../s1_evil/loot.txt",
        "file-symlink-out": "link.txt",
        "dir-symlink-out": "dirlink/secret.txt",
        "proc-self-root": f"escape{top / 'secret.txt'}",
    }


def _plain_read(path: str | Path) -> str:
    with open(path) as handle:
        return handle.read()


def _name(aim: str) -> str:
    return aim.split(":")[0]


@pytest.mark.parametrize("aim", sorted(AIMS))
@pytest.mark.parametrize(
    "way",
    [
        "dot-dot",
        "dot-dot-inside-first",
        "absolute-outside",
        "prefix-confusion-absolute",
        "prefix-confusion-relative",
        "file-symlink-out",
        "dir-symlink-out",
        "proc-self-root",
    ],
)
async def test_every_way_out_is_refused(
    layout: Any, tools: Any, resolution: str, aim: str, way: str
) -> None:
    path = _ways_out(layout)[way]
    # Control: the same path, opened plainly from the working directory, does lead out.
    assert _plain_read(path if os.path.isabs(path) else layout.root / path) == SECRET
    before = layout.outside()

    if way == "file-symlink-out" and aim in ("delete_file", "move_file:source", "glob"):
        # The last component is the symlink itself: these act on (or list) the link in the
        # working directory, never on what it points to.
        result = await tools(_name(aim), **AIMS[aim](path))
        assert SECRET not in result
    elif way == "file-symlink-out" and aim == "move_file:destination":
        # Replacing the link (overwrite=true) swaps a name in the working directory only.
        await tools(_name(aim), **AIMS[aim](path))
        assert not (layout.root / "link.txt").is_symlink()
    else:
        with pytest.raises(ToolError) as refused:
            await tools(_name(aim), **AIMS[aim](path))
        assert SECRET not in str(refused.value)
        assert isinstance(refused.value, PathRefused), str(refused.value)

    assert layout.outside() == before, "something outside the working directory changed"
    assert (layout.top / "secret.txt").read_text() == SECRET


@pytest.mark.parametrize("aim", sorted(AIMS))
async def test_the_same_tool_works_inside(layout: Any, tools: Any, aim: str) -> None:
    before = layout.outside()
    result = await tools(_name(aim), **INSIDE[aim])
    assert isinstance(result, str) and result
    assert layout.outside() == before


@pytest.mark.parametrize("aim", sorted(AIMS))
async def test_nul_bytes_are_refused(layout: Any, tools: Any, aim: str) -> None:
    # "notes.txt\0.png" would be read as "notes.txt" by C code that stops at the NUL.
    (layout.root / "notes.txt").write_text(SECRET)
    before = layout.outside()
    with pytest.raises(PathRefused, match="NUL"):
        await tools(_name(aim), **AIMS[aim]("notes.txt\0.png"))
    assert layout.outside() == before
    # Control: without the NUL byte the same call reaches the file.
    if aim in ("read_file", "grep"):
        assert SECRET in await tools(_name(aim), **AIMS[aim]("notes.txt"))


async def test_absolute_paths_inside_are_accepted(layout: Any, tools: Any) -> None:
    assert await tools("read_file", path=str(layout.root / "sub" / "deep.txt")) == "deep\n"
    assert "sub/deep.txt" in await tools("glob", pattern=str(layout.root / "**" / "*.txt"))


async def test_the_working_directory_itself_is_not_a_file(tools: Any) -> None:
    for name, arguments in [
        ("write_file", {"path": ".", "content": "x"}),
        ("delete_file", {"path": "."}),
        ("move_file", {"source": ".", "destination": "elsewhere"}),
        ("edit_file", {"path": "./", "old_text": "a", "new_text": "b"}),
    ]:
        with pytest.raises(ToolError, match="working directory itself"):
            await tools(name, **arguments)


async def test_symlinks_inside_are_never_followed_by_writes(layout: Any, tools: Any) -> None:
    # A symlink to a file *inside*: reads may resolve it (openat2 keeps it beneath the
    # root), but writes never go through a link: they refuse or act on the link itself.
    (layout.root / "alias.txt").symlink_to("notes.txt")
    with pytest.raises(PathRefused, match="symlink"):
        await tools("write_file", path="alias.txt", content="x")
    with pytest.raises(PathRefused, match="symlink"):
        await tools("edit_file", path="alias.txt", old_text="hello", new_text="bye")
    assert (layout.root / "notes.txt").read_text() == "hello notes\n"
    await tools("delete_file", path="alias.txt")
    assert not (layout.root / "alias.txt").is_symlink()
    assert (layout.root / "notes.txt").exists()


async def test_walks_do_not_follow_directory_symlinks(layout: Any, tools: Any) -> None:
    (layout.root / "dirlink").symlink_to(layout.top)
    found = await tools("glob", pattern="**/*")
    assert "dirlink" in found.splitlines()  # listed by name...
    assert "secret.txt" not in found and "loot" not in found  # ...never entered
    assert "no matches" in await tools("grep", pattern="outside")
    listing = await tools("list_dir")
    assert f"dirlink -> {layout.top}" in listing


async def test_write_creates_parents_component_by_component(layout: Any, tools: Any) -> None:
    (layout.root / "out").symlink_to(layout.top)
    with pytest.raises(PathRefused):
        await tools("write_file", path="out/new/file.txt", content="x")
    assert not (layout.top / "new").exists()
    # A file where a directory should be is a clear error, not a refusal.
    with pytest.raises(ToolError, match="not a directory"):
        await tools("write_file", path="notes.txt/inner.txt", content="x")
    await tools("write_file", path="a/b/c/d.txt", content="deep")
    assert (layout.root / "a" / "b" / "c" / "d.txt").read_text() == "deep"
