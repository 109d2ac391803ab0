"""Fixtures: a working directory with an outside world next to it, and the tools.

The layout (under pytest's ``tmp_path``)::

    secret.txt              "outside secret"  (outside)
    w/s1/                   the working directory
        notes.txt           "hello notes\\n"
        sub/deep.txt        "deep\\n"
    w/s1_evil/loot.txt      "outside secret"  (a sibling whose name starts with "s1")
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from koboi.sandbox import PassthroughSandbox
from koboi.tools import Tool, ToolContext
from koboi_confine import paths
from koboi_tools_fs.config import FsSettings
from koboi_tools_fs.tools import make_tools

SECRET = "outside secret"


@dataclass
class Layout:
    top: Path
    root: Path
    evil: Path

    def outside(self) -> dict[str, str]:
        """Every entry outside the root, with a digest of each file and the mtime of each dir.

        A directory's mtime changes whenever an entry is created, renamed or
        removed in it, so a temp file made and removed outside is caught too.
        """
        found: dict[str, str] = {}
        for dirpath, dirnames, filenames in os.walk(self.top):
            here = Path(dirpath)
            if here == self.root or self.root in here.parents:
                dirnames[:] = []
                continue
            found[str(here)] = f"dir {here.stat().st_mtime_ns}"
            for name in filenames:
                path = here / name
                if path.is_symlink():
                    found[str(path)] = f"link {os.readlink(path)}"
                else:
                    found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        return found


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    root = tmp_path / "w" / "s1"
    (root / "sub").mkdir(parents=True)
    (root / "notes.txt").write_text("hello notes\n")
    (root / "sub" / "deep.txt").write_text("deep\n")
    evil = tmp_path / "w" / "s1_evil"
    evil.mkdir()
    (evil / "loot.txt").write_text(SECRET)
    (tmp_path / "secret.txt").write_text(SECRET)
    return Layout(tmp_path, root, evil)


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways open_inside resolves: openat2 (Linux 5.6+) and the O_NOFOLLOW walk."""
    monkeypatch.setattr(paths, "_openat2_works", False if request.param == "walk" else None)
    return str(request.param)


def context(root: Path, session_id: str = "s1") -> ToolContext:
    return ToolContext(
        session_id=session_id,
        call_id="call-1",
        step=1,
        sandbox=PassthroughSandbox(workdir=root),
        workdir=root,
    )


class Tools:
    """The nine tools, called as the kernel calls them, in one working directory."""

    def __init__(self, root: Path, settings: FsSettings | None = None) -> None:
        self.root = root
        self.by_name: dict[str, Tool] = dict(make_tools(settings))
        self.ctx = context(root)

    async def __call__(self, name: str, **arguments: Any) -> str:
        """The result text; a ToolError (refusal or failure) propagates."""
        tool = self.by_name[name]
        result = await tool(tool.parse_arguments(arguments), self.ctx)
        assert not result.is_error
        return result.content


@pytest.fixture
def tools(layout: Layout) -> Tools:
    return Tools(layout.root)


@pytest.fixture
def make_tools_with(layout: Layout) -> Callable[..., Tools]:
    def make(**settings: Any) -> Tools:
        return Tools(layout.root, FsSettings(**settings))

    return make
