"""The tools under the ``restricted`` sandbox: git runs confined, as the session's own user
when koboi is root.

Under ``restricted`` every process gets an environment built from nothing, in
which HOME is the session's workdir and ``GIT_CONFIG_*`` names are stripped
even when a tool asks for them. These tests show what that means for git and
that the tools stay safe there.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from koboi import AllowAllApprover, KoboiAgent
from koboi.errors import ToolError
from koboi.store import InMemoryStore
from koboi.tools import Tool, ToolContext
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import probe
from koboi_sandbox.restricted import RestrictedSandbox, required_gaps
from koboi_tools_git.repository import Repository

pytestmark = pytest.mark.anyio

Git = Callable[..., str]
GitProc = Callable[..., subprocess.CompletedProcess[str]]
Call = Callable[..., Awaitable[str]]
Context = Callable[..., ToolContext]

AS_ROOT = os.geteuid() == 0
HARD_GAPS = required_gaps(RestrictedOptions(isolation="hard"), probe())
ISOLATIONS = [
    "standard",
    pytest.param(
        "hard",
        marks=pytest.mark.skipif(bool(HARD_GAPS), reason=f"no isolation hard here: {HARD_GAPS}"),
    ),
]
NAMES = ["git_status", "git_diff", "git_log", "git_commit"]


def _sandbox(open_dir: Path, isolation: str = "standard") -> RestrictedSandbox:
    return RestrictedSandbox(
        RestrictedOptions(workdir=str(open_dir / "wd"), isolation=isolation)  # type: ignore[arg-type]
    )


def _give_to_sandbox_user(path: Path) -> None:
    """What a session's workdir is like when the sandbox user made its content."""
    if not AS_ROOT:
        return
    owner = path.stat()  # the sandbox gives each session's workdir to the session's uid
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), owner.st_uid, owner.st_gid)


def _session_repo(
    open_dir: Path, session: str, make_repo: Callable[..., Path], *, give: bool = True
) -> Path:
    workdir = _sandbox(open_dir).workdir_for(session)  # made for the session's uid, mode 0700
    make_repo(workdir)
    if give:
        _give_to_sandbox_user(workdir)
    return workdir


def _hook(repo: Path, marker: Path, name: str = "pre-commit") -> None:
    hook = repo / ".git" / "hooks" / name
    hook.write_text(f"#!/bin/sh\necho ran >> '{marker}'\n")
    hook.chmod(0o755)


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_an_agent_uses_the_git_tools_in_its_sandboxed_workdir(
    open_dir: Path, make_repo: Callable[..., Path], git: Git, git_proc: GitProc, isolation: str
) -> None:
    workdir = _session_repo(open_dir, "sess-1", make_repo)
    marker = workdir / ".git" / "hook-ran"
    _hook(workdir, marker)
    (workdir / "a.txt").write_text("alpha, changed\n")
    # HOME is the workdir under restricted: this is git's *global* config there.
    (workdir / ".gitconfig").write_text("[user]\n\tname = Mallory\n\temail = m@example.invalid\n")
    _give_to_sandbox_user(workdir)
    steps: list[Any] = [
        {"tool_calls": [{"name": "git_status", "arguments": {}}]},
        {"tool_calls": [{"name": "git_diff", "arguments": {"paths": ["a.txt"]}}]},
        {
            "tool_calls": [
                {
                    "name": "git_commit",
                    "arguments": {"message": "Change a via koboi", "paths": ["a.txt"]},
                }
            ]
        },
        {"tool_calls": [{"name": "git_log", "arguments": {"max_count": 5}}]},
        "done",
    ]
    config = {
        "llm": {"provider": "scripted", "script": steps},
        "tools": {"builtin": NAMES},
        "tools_git": {
            "author_name": "Sandboxed Agent",
            "author_email": "sandboxed@example.invalid",
        },
        "sandbox": {
            "backend": "restricted",
            "workdir": str(open_dir / "wd"),
            "isolation": isolation,
        },
    }
    async with KoboiAgent.from_dict(
        config, approver=AllowAllApprover(), store=InMemoryStore()
    ) as agent:
        result = await agent.run("commit my change", session_id="sess-1")

    results = {m.name or "": m for m in result.messages if m.role == "tool"}
    assert sorted(results) == sorted(NAMES)
    assert not any(m.is_error for m in results.values()), [m.content for m in results.values()]
    assert "Not staged (1):\n  modified: a.txt" in results["git_status"].content
    assert "Untracked (1):\n  .gitconfig" in results["git_status"].content
    assert "+alpha, changed" in results["git_diff"].content
    head = git(workdir, "rev-parse", "HEAD").strip()
    assert results["git_commit"].content.splitlines()[0] == (
        f"Committed {head} on main: Change a via koboi"
    )
    assert results["git_log"].content.splitlines()[0].startswith(head[:7])
    assert "(Sandboxed Agent) Change a via koboi" in results["git_log"].content
    assert git(workdir, "log", "-1", "--format=%an <%ae>").strip() == (
        "Sandboxed Agent <sandboxed@example.invalid>"
    )
    if AS_ROOT:  # git really ran as the sandbox user
        assert (workdir / ".git" / "index").stat().st_uid == workdir.stat().st_uid != 0
    assert not marker.exists()
    # Control: the same hook runs for a plain git commit.
    assert git_proc(workdir, "commit", "-q", "--allow-empty", "-m", "plain").returncode == 0
    assert marker.exists()


@pytest.mark.skipif(not AS_ROOT, reason="the sandbox user differs from koboi's only as root")
async def test_a_repository_another_user_owns_is_trusted_only_as_the_sessions_workdir(
    open_dir: Path, make_repo: Callable[..., Path], tools: dict[str, Tool], call: Call
) -> None:
    workdir = _session_repo(open_dir, "theirs", make_repo, give=False)  # .git is root's
    (workdir / "a.txt").chmod(0o666)
    (workdir / "a.txt").write_text("alpha, changed\n")
    sandbox = _sandbox(open_dir)
    # Control: plain git as the sandbox user refuses it.
    plain = await sandbox.run_process(["git", "status"], session_id="theirs")
    assert plain.returncode != 0 and "dubious ownership" in plain.stderr
    ctx = ToolContext(session_id="theirs", call_id="c", step=1, sandbox=sandbox, workdir=workdir)
    assert "modified: a.txt" in await call(tools["git_status"], ctx)
    assert "+alpha, changed" in await call(tools["git_diff"], ctx)
    assert "first" in await call(tools["git_log"], ctx)
    # Trusted is not writable: the session's user still cannot write root's .git.
    with pytest.raises(ToolError, match=r"git (add|commit) failed"):
        await call(tools["git_commit"], ctx, message="x", paths=["a.txt"])


async def test_what_git_gets_of_the_environment_the_tools_ask_for(
    open_dir: Path, make_repo: Callable[..., Path]
) -> None:
    """The report's finding: under restricted, GIT_CONFIG_* never reach git; the rest does."""
    workdir = _session_repo(open_dir, "env", make_repo)
    sandbox = _sandbox(open_dir)
    ctx = ToolContext(session_id="env", call_id="c", step=1, sandbox=sandbox, workdir=workdir)
    from koboi_tools_git.settings import ToolsGitSection

    asked = Repository(ctx, workdir, ToolsGitSection()).environment()
    assert asked["GIT_CONFIG_GLOBAL"] == os.devnull and asked["GIT_CONFIG_NOSYSTEM"] == "1"
    seen = dict(
        line.split("=", 1)
        for line in (await sandbox.run_process(["env"], env=asked, session_id="env")).stdout.split(
            "\n"
        )
        if "=" in line
    )
    assert "GIT_CONFIG_GLOBAL" not in seen and "GIT_CONFIG_NOSYSTEM" not in seen
    assert seen["HOME"] == str(workdir)
    for name in (
        "GIT_TERMINAL_PROMPT",
        "GIT_OPTIONAL_LOCKS",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_CEILING_DIRECTORIES",
        "XDG_CONFIG_HOME",
    ):
        assert seen[name] == asked[name], name


async def test_a_gitconfig_in_home_cannot_run_code_through_the_tools(
    open_dir: Path, make_repo: Callable[..., Path], tools: dict[str, Tool], call: Call
) -> None:
    workdir = _session_repo(open_dir, "home", make_repo)
    marker = workdir / "hook-ran"
    hooks = workdir / "myhooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text(f"#!/bin/sh\necho ran >> '{marker}'\n")
    (hooks / "pre-commit").chmod(0o755)
    # ~/.gitconfig, since HOME is the workdir: global (even "protected") config.
    (workdir / ".gitconfig").write_text(f"[core]\n\thooksPath = {hooks}\n")
    (workdir / "a.txt").write_text("alpha, changed\n")
    _give_to_sandbox_user(workdir)
    sandbox = _sandbox(open_dir)
    ctx = ToolContext(session_id="home", call_id="c", step=1, sandbox=sandbox, workdir=workdir)

    assert "Committed" in await call(tools["git_commit"], ctx, message="x", paths=["a.txt"])
    assert not marker.exists()
    # Control: plain git in the same sandbox reads that file and runs the hook.
    identity = {"GIT_AUTHOR_NAME": "p", "GIT_AUTHOR_EMAIL": "p@x", "GIT_COMMITTER_NAME": "p"}
    plain = await sandbox.run_process(
        ["git", "commit", "-q", "--allow-empty", "-m", "plain"],
        env={**identity, "GIT_COMMITTER_EMAIL": "p@x"},
        session_id="home",
    )
    assert plain.returncode == 0, plain.stderr
    assert marker.exists()

    # A filter driver there would run on every read: refused, naming the file.
    (workdir / ".gitconfig").write_text('[filter "x"]\n\tclean = cat\n')
    with pytest.raises(ToolError, match=r"filter\.x\.clean \(from file:.*/home/\.gitconfig\)"):
        await call(tools["git_status"], ctx)
