"""A symlink swapped in *during* the calls never leads a tool out.

Another process flips ``dir`` between a real directory inside the working
directory and a symlink to a directory outside, atomically, with
``renameat2(RENAME_EXCHANGE)``, as fast as it can, on the other core. The
tools read, write, list, glob, grep, edit, patch, move and delete through
``dir`` meanwhile. The outside secret never appears in a result and nothing
outside changes (not even a temp file made and removed: the outside
directory's mtime is checked too).

Control: the flipping is real: plain ``open()`` calls through ``dir`` made
during the same run do read the outside secret.
"""

from __future__ import annotations

import contextlib
import ctypes
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from koboi.errors import ToolError

pytestmark = pytest.mark.anyio

SECRET = "outside secret"
SECRET_NAME = "only-outside-name.txt"
#: How long each run of tool calls lasts, in seconds.
DURATION = 1.5

_SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
AT_FDCWD, RENAME_EXCHANGE = -100, 2
flips = 0
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
    flips += 1
"""


def _has_rename_exchange() -> bool:
    return hasattr(ctypes.CDLL(None), "renameat2")


@pytest.fixture
def flipping(layout: Any) -> Any:
    """``dir`` flips between ``real/`` (inside) and a symlink to ``outside/``."""
    if not _has_rename_exchange():
        pytest.skip("this libc has no renameat2")
    root, top = layout.root, layout.top
    outside = top / "outside"
    outside.mkdir()
    for name in ("file.txt", "counter.txt", "victim.txt"):
        (outside / name).write_text(SECRET if name == "file.txt" else f"{SECRET} {name}")
    (outside / SECRET_NAME).write_text(SECRET)
    real = root / "dir"
    real.mkdir()
    (real / "file.txt").write_text("inside\n")
    (real / "counter.txt").write_text("0\n")
    (root / "other").symlink_to(outside)
    before = layout.outside()
    proc = subprocess.Popen(
        [sys.executable, "-c", _SWAPPER, str(root / "dir"), str(root / "other")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    try:
        yield before
    finally:
        proc.kill()
        proc.wait(5)
        proc.stdout.close()
    assert proc.returncode == -9, "the swapper stopped early"
    assert layout.outside() == before, "something outside the working directory changed"
    assert (outside / "file.txt").read_text() == SECRET


def _plain_reads(root: Path, seconds: float) -> set[str]:
    seen: set[str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), open(root / "dir" / "file.txt") as handle:
            seen.add(handle.read())
    return seen


async def test_the_swap_is_real_for_a_plain_open(layout: Any, flipping: Any) -> None:
    seen = _plain_reads(layout.root, 0.5)
    assert SECRET in seen and "inside\n" in seen  # control: plain open() is led out


async def test_reads_lists_and_searches_never_see_outside(
    layout: Any, tools: Any, resolution: str, flipping: Any
) -> None:
    results: list[str] = []
    refused = 0
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"path": "dir/file.txt"}),
        ("list_dir", {"path": "dir"}),
        ("glob", {"pattern": "dir/*"}),
        ("glob", {"pattern": "**/*.txt"}),
        ("grep", {"pattern": "secret|inside", "path": "dir"}),
        ("grep", {"pattern": "secret|inside"}),
        ("read_file", {"path": str(layout.root / "dir" / "file.txt")}),
    ]
    deadline = time.monotonic() + DURATION
    while time.monotonic() < deadline:
        for name, arguments in calls:
            try:
                results.append(await tools(name, **arguments))
            except ToolError:
                refused += 1
    text = "\n".join(results)
    assert SECRET not in text
    assert SECRET_NAME not in text
    # Controls: the calls did work whenever "dir" was the real directory, and were refused
    # (or found nothing) when it was the symlink.
    assert "inside" in text
    assert refused > 0 or "no paths match" in text


async def test_writes_edits_patches_moves_deletes_never_touch_outside(
    layout: Any, tools: Any, resolution: str, flipping: Any
) -> None:
    root = layout.root
    patch_up = "--- a/dir/counter.txt\n+++ b/dir/counter.txt\n@@ -1 +1 @@\n-0\n+1\n"
    patch_down = "--- a/dir/counter.txt\n+++ b/dir/counter.txt\n@@ -1 +1 @@\n-1\n+0\n"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": "dir/new.txt", "content": "written"}),
        ("write_file", {"path": "dir/victim.txt", "content": "inside victim"}),
        ("write_file", {"path": "dir/deeper/new.txt", "content": "written"}),
        ("edit_file", {"path": "dir/counter.txt", "old_text": "0", "new_text": "1"}),
        ("edit_file", {"path": "dir/counter.txt", "old_text": "1", "new_text": "0"}),
        ("apply_patch", {"patch": patch_up}),
        ("apply_patch", {"patch": patch_down}),
        ("move_file", {"source": "dir/victim.txt", "destination": "moved.txt"}),
        ("move_file", {"source": "moved.txt", "destination": "dir/victim.txt"}),
        ("delete_file", {"path": "dir/victim.txt"}),
        ("delete_file", {"path": "dir/new.txt"}),
    ]
    done = 0
    messages: list[str] = []
    deadline = time.monotonic() + DURATION
    while time.monotonic() < deadline:
        for name, arguments in calls:
            try:
                messages.append(await tools(name, **arguments))
                done += 1
            except ToolError as exc:
                messages.append(str(exc))
    assert SECRET not in "\n".join(messages)
    assert done > 0  # control: the calls did succeed whenever "dir" was the real directory
    assert not (root / "moved.txt").exists() or SECRET not in (root / "moved.txt").read_text()
