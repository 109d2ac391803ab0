"""Refusals and neutralised git features, each beside a control showing the danger is real."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from koboi.errors import ToolError
from koboi.sandbox import PassthroughSandbox, ProcessResult
from koboi.tools import Tool, ToolContext
from koboi_confine.paths import PathRefused

pytestmark = pytest.mark.anyio

Git = Callable[..., str]
GitProc = Callable[..., subprocess.CompletedProcess[str]]
Call = Callable[..., Awaitable[str]]
Context = Callable[..., ToolContext]


def _marker_script(path: Path, marker: Path) -> Path:
    """An executable that, if git ever runs it, leaves ``marker`` behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho ran >> '{marker}'\ncat\n")
    path.chmod(0o755)
    return path


class Recording(PassthroughSandbox):
    """A passthrough sandbox that notes every process a tool asks it to run."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    async def run_process(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, **kw: Any
    ) -> ProcessResult:
        self.calls.append((list(argv), dict(env or {})))
        return await super().run_process(argv, env=env, **kw)


# -- paths ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/etc/passwd", "a.txt\0b"])
async def test_paths_outside_the_workdir_are_refused(
    repo: Path, tools: dict[str, Tool], call: Call, git: Git, context: Context, bad: str
) -> None:
    sandbox = Recording(repo)
    ctx = context(repo, sandbox)
    (repo / "a.txt").write_text("alpha 2\n")
    before = git(repo, "rev-parse", "HEAD")
    for name, arguments in (
        ("git_diff", {"paths": [bad]}),
        ("git_log", {"paths": [bad]}),
        ("git_commit", {"message": "x", "paths": ["a.txt", bad]}),
    ):
        with pytest.raises(PathRefused):
            await call(tools[name], ctx, **arguments)
    assert sandbox.calls == []  # refused before git ever ran
    assert git(repo, "rev-parse", "HEAD") == before
    # Control: the same calls with paths inside (relative, and absolute below the workdir).
    inside = str(repo / "a.txt")
    assert "+alpha 2" in await call(tools["git_diff"], ctx, paths=[inside])
    assert "first" in await call(tools["git_log"], ctx, paths=["./a.txt"])
    assert "Committed" in await call(tools["git_commit"], ctx, message="x", paths=[inside])


async def test_a_path_like_an_option_is_only_ever_a_pathspec(
    tmp_path: Path,
    repo: Path,
    ctx: ToolContext,
    tools: dict[str, Tool],
    call: Call,
    git: Git,
    git_proc: GitProc,
) -> None:
    outside = tmp_path / "written-by-git.txt"
    (repo / "a.txt").write_text("alpha 2\n")
    # Control: as an option, git would write the diff wherever the model says.
    assert git_proc(repo, "diff", f"--output={outside}").returncode == 0
    assert outside.exists()
    outside.unlink()

    for name, arguments in (
        ("git_diff", {"paths": [f"--output={outside}"]}),
        ("git_log", {"paths": [f"--output={outside}", "--all"]}),
    ):
        out = await call(tools[name], ctx, **arguments)
        assert "given paths" in out  # matched nothing: a pathspec, not an option
    with pytest.raises(ToolError, match="did not match"):
        await call(tools["git_commit"], ctx, message="x", paths=["--all"])
    assert not outside.exists()
    assert git(repo, "rev-parse", "HEAD~0") == git(repo, "rev-parse", "HEAD")

    # Control: a file that really has such a name is diffed and committed by name.
    odd = repo / "--output=x.txt"
    odd.write_text("odd\n")
    git(repo, "add", "--", odd.name)
    git(repo, "commit", "-q", "-m", "odd")
    odd.write_text("odd 2\n")
    diff = await call(tools["git_diff"], ctx, paths=[odd.name])
    assert "+odd 2" in diff and "alpha" not in diff
    await call(tools["git_commit"], ctx, message="odd 2", paths=[odd.name])
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == [odd.name]
    assert not (repo / "x.txt").exists()


async def test_every_model_value_reaches_git_after_a_double_dash(
    repo: Path, tools: dict[str, Tool], call: Call, context: Context
) -> None:
    """Seen from the sandbox: what argv and environment the tools hand to git."""

    sandbox = Recording(repo)
    real = _real(repo)
    ctx = context(repo, sandbox)
    (repo / "-x.txt").write_text("x\n")
    await call(tools["git_status"], ctx)
    await call(tools["git_diff"], ctx, paths=["-x.txt"], context_lines=1)
    await call(tools["git_log"], ctx, paths=["-x.txt"], max_count=3)
    await call(tools["git_commit"], ctx, message="-m x", paths=["-x.txt"])
    assert len(sandbox.calls) >= 12
    for argv, env in sandbox.calls:
        assert argv[0] == "git"
        assert {"core.hooksPath=/dev/null", "core.fsmonitor=false", "protocol.allow=never"} <= set(
            argv
        )
        assert f"safe.directory={real}" in argv
        assert not any("safe.directory=*" in a for a in argv)
        assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == os.devnull
        assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_OPTIONAL_LOCKS"] == "0"
        assert env["GIT_AUTHOR_NAME"] == "Ada Agent"
        if "-x.txt" in " ".join(argv):
            assert argv.index("--") < argv.index("./-x.txt")
        # Nothing the model said is an argument of its own: only ./-prefixed pathspecs.
        assert "-m x" not in argv
    assert git_log_subject(repo) == "-m x"


def _real(path: Path) -> str:
    return os.path.realpath(path)


def git_log_subject(repo: Path) -> str:
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "log", "-1", "--format=%s"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


# -- which repository -------------------------------------------------------------------


async def test_a_repository_above_the_workdir_is_refused(
    tmp_path: Path,
    tools: dict[str, Tool],
    call: Call,
    context: Context,
    git: Git,
    make_repo: Callable[..., Path],
) -> None:
    outer = make_repo(tmp_path / "outer")
    sub = outer / "sub"
    sub.mkdir()
    (sub / "s.txt").write_text("s\n")
    (outer / "a.txt").write_text("alpha 2\n")
    before = git(outer, "rev-parse", "HEAD")
    for name, arguments in (
        ("git_status", {}),
        ("git_diff", {}),
        ("git_log", {}),
        ("git_commit", {"message": "x", "all": True}),
    ):
        with pytest.raises(ToolError, match=r"top-level .*outer.* is outside the working dir"):
            await call(tools[name], context(sub), **arguments)
    assert git(outer, "rev-parse", "HEAD") == before
    # Control: the same repository, from its own top-level, is fine.
    assert "modified: a.txt" in await call(tools["git_status"], context(outer))


async def test_a_work_tree_or_git_dir_pointing_outside_is_refused(
    tmp_path: Path,
    repo: Path,
    ctx: ToolContext,
    tools: dict[str, Tool],
    call: Call,
    context: Context,
    git: Git,
    make_repo: Callable[..., Path],
) -> None:
    git(repo, "config", "core.worktree", str(tmp_path))
    with pytest.raises(ToolError, match=r"top-level .* is outside"):
        await call(tools["git_status"], ctx)
    git(repo, "config", "--unset", "core.worktree")
    assert "clean" in await call(tools["git_status"], ctx)  # control

    elsewhere = make_repo(tmp_path / "elsewhere")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".git").write_text(f"gitdir: {elsewhere / '.git'}\n")
    with pytest.raises(ToolError, match=r"git directory .* is outside"):
        await call(tools["git_commit"], context(linked), message="x", all=True)


# -- code the repository would run --------------------------------------------------


async def test_hooks_never_run_on_commit(
    tmp_path: Path,
    repo: Path,
    ctx: ToolContext,
    tools: dict[str, Tool],
    call: Call,
    git_proc: GitProc,
) -> None:
    marker = tmp_path / "hook-ran"
    hooks = repo / ".git" / "hooks"
    for hook in (
        "pre-commit",
        "prepare-commit-msg",
        "commit-msg",
        "post-commit",
        "reference-transaction",
        "post-index-change",
    ):
        _marker_script(hooks / hook, marker)
    (repo / "a.txt").write_text("alpha 2\n")
    await call(tools["git_commit"], ctx, message="through koboi", paths=["a.txt"])
    await call(tools["git_status"], ctx)
    assert not marker.exists()
    # The repository may also point hooksPath at hooks of its own: still nothing runs.
    _marker_script(repo / "myhooks" / "pre-commit", marker)
    assert git_proc(repo, "config", "core.hooksPath", "myhooks").returncode == 0
    (repo / "b.txt").write_text("bravo 2\n")
    await call(tools["git_commit"], ctx, message="again", all=True)
    assert not marker.exists()
    # Control: plain git commit runs the very same hook.
    assert git_proc(repo, "commit", "-q", "--allow-empty", "-m", "plain").returncode == 0
    assert marker.exists()


async def test_fsmonitor_never_runs(
    tmp_path: Path,
    repo: Path,
    ctx: ToolContext,
    tools: dict[str, Tool],
    call: Call,
    git: Git,
    git_proc: GitProc,
) -> None:
    marker = tmp_path / "fsmonitor-ran"
    script = _marker_script(tmp_path / "fsmonitor.sh", marker)
    git(repo, "config", "core.fsmonitor", str(script))
    (repo / "a.txt").write_text("alpha 2\n")
    await call(tools["git_status"], ctx)
    await call(tools["git_diff"], ctx)
    await call(tools["git_commit"], ctx, message="x", all=True)
    assert not marker.exists()
    git_proc(repo, "status")  # control
    assert marker.exists()


async def test_a_repository_with_a_filter_driver_is_refused(
    tmp_path: Path,
    repo: Path,
    ctx: ToolContext,
    tools: dict[str, Tool],
    call: Call,
    git: Git,
    git_proc: GitProc,
) -> None:
    marker = tmp_path / "filter-ran"
    (repo / ".gitattributes").write_text("*.txt filter=evil\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    git(repo, "config", "filter.evil.clean", str(_marker_script(tmp_path / "clean.sh", marker)))
    (repo / "a.txt").write_text("alpha 2\n")
    for name, arguments in (
        ("git_status", {}),
        ("git_diff", {}),
        ("git_log", {}),
        ("git_commit", {"message": "x", "all": True}),
    ):
        with pytest.raises(ToolError, match=r"filter driver.*filter\.evil\.clean \(from file:"):
            await call(tools[name], ctx, **arguments)
    assert not marker.exists()
    git_proc(repo, "diff")  # control: plain git runs it
    assert marker.exists()


async def test_external_diff_and_textconv_never_run(
    tmp_path: Path,
    repo: Path,
    ctx: ToolContext,
    tools: dict[str, Tool],
    call: Call,
    git: Git,
    git_proc: GitProc,
) -> None:
    marker = tmp_path / "diff-driver-ran"
    script = str(_marker_script(tmp_path / "driver.sh", marker))
    git(repo, "config", "diff.external", script)
    git(repo, "config", "diff.conv.textconv", script)
    (repo / ".git" / "info" / "attributes").write_text("*.txt diff=conv\n")
    (repo / "a.txt").write_text("alpha 2\n")
    out = await call(tools["git_diff"], ctx)
    assert "-alpha\n+alpha 2" in out
    assert not marker.exists()
    git_proc(repo, "diff")  # control
    assert marker.exists()


# -- ownership --------------------------------------------------------------------------


def _nobody() -> tuple[int, int]:
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def _chown_tree(path: Path, owner: tuple[int, int]) -> None:
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), *owner)
    os.lchown(path, *owner)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a repository to another user")
async def test_the_sessions_own_workdir_is_trusted_whoever_owns_it(
    tmp_path: Path,
    tools: dict[str, Tool],
    call: Call,
    context: Context,
    git: Git,
    git_proc: GitProc,
    make_repo: Callable[..., Path],
) -> None:
    repo = make_repo(tmp_path / "theirs")
    _chown_tree(repo, _nobody())
    (repo / "a.txt").write_text("alpha 2\n")
    # Control: plain git, as root, refuses a repository another user owns.
    plain = git_proc(repo, "status", trust_any_owner=False)
    assert plain.returncode != 0 and "dubious ownership" in plain.stderr
    ctx = context(repo)
    assert "modified: a.txt" in await call(tools["git_status"], ctx)
    assert "Committed" in await call(tools["git_commit"], ctx, message="x", all=True)

    # Only that directory: a repository of another user above the workdir stays refused.
    outer = make_repo(tmp_path / "outer")
    (outer / "sub").mkdir()
    _chown_tree(outer, _nobody())
    with pytest.raises(ToolError, match="refused"):
        await call(tools["git_status"], context(outer / "sub"))
    shutil.rmtree(outer)
