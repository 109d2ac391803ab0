"""Fixtures: real git repositories in temporary working directories, and a way to call tools.

The tests set repositories up (and run the positive controls) with plain
``git`` through :mod:`subprocess`; the tools themselves only ever run git
through ``ctx.run_process``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from koboi.sandbox import PassthroughSandbox, Sandbox
from koboi.tools import Tool, ToolContext
from koboi_tools_git.settings import ToolsGitSection
from koboi_tools_git.tools import GitCommit, GitDiff, GitLog, GitStatus

TESTER = ("Tester", "tester@example.invalid")


def plain_env(home: Path) -> dict[str, str]:
    """What a person's plain ``git`` sees here: no config but the repository's own."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": TESTER[0],
        "GIT_AUTHOR_EMAIL": TESTER[1],
        "GIT_COMMITTER_NAME": TESTER[0],
        "GIT_COMMITTER_EMAIL": TESTER[1],
    }


def _git_proc(
    cwd: Path, *args: str, input: str | None = None, trust_any_owner: bool = True
) -> subprocess.CompletedProcess[str]:
    """Plain git, as a person would run it (by default trusting any owner: tests chown repos)."""
    trust = ["-c", "safe.directory=*"] if trust_any_owner else []
    return subprocess.run(
        ["git", *trust, "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=plain_env(cwd),
        capture_output=True,
        text=True,
        input=input,
        timeout=30,
        check=False,
    )


def _git(cwd: Path, *args: str, input: str | None = None) -> str:
    """Plain git that must succeed; its stdout."""
    proc = _git_proc(cwd, *args, input=input)
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}{proc.stdout}")
    return proc.stdout


def _make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A repository at ``path`` with one commit of ``files`` (default: a.txt and b.txt)."""
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q")
    for name, text in (files or {"a.txt": "alpha\n", "b.txt": "bravo\n"}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "first")
    return path


def _context(workdir: Path, sandbox: Sandbox | None = None, session_id: str = "s1") -> ToolContext:
    return ToolContext(
        session_id=session_id,
        call_id="call-1",
        step=1,
        sandbox=sandbox or PassthroughSandbox(workdir=workdir),
        workdir=workdir,
    )


async def _call(tool: Tool, ctx: ToolContext, **arguments: Any) -> str:
    """Call ``tool`` as the kernel would: parse the arguments, run it through the sandbox."""
    result = await ctx.sandbox.run_tool(tool, tool.parse_arguments(arguments), ctx)
    assert not result.is_error, result.content
    return result.content


# The helpers as fixtures: test modules cannot import conftest under importlib mode.


@pytest.fixture
def git() -> Callable[..., str]:
    return _git


@pytest.fixture
def git_proc() -> Callable[..., subprocess.CompletedProcess[str]]:
    return _git_proc


@pytest.fixture
def make_repo() -> Callable[..., Path]:
    return _make_repo


@pytest.fixture
def context() -> Callable[..., ToolContext]:
    return _context


@pytest.fixture
def call() -> Callable[..., Awaitable[str]]:
    return _call


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return _make_repo(tmp_path / "work")


@pytest.fixture
def ctx(repo: Path) -> ToolContext:
    return _context(repo)


@pytest.fixture
def settings() -> ToolsGitSection:
    return ToolsGitSection(author_name="Ada Agent", author_email="ada@example.invalid")


@pytest.fixture
def tools(settings: ToolsGitSection) -> dict[str, Tool]:
    made = [GitStatus(settings), GitDiff(settings), GitLog(settings), GitCommit(settings)]
    return {tool.name: tool for tool in made}


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user can traverse (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="koboi-tools-git-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
