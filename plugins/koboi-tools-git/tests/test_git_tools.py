"""What each tool does on a real repository (passthrough sandbox, a temp workdir)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from koboi.errors import ToolArgumentError, ToolError
from koboi.tools import Tool, ToolContext
from koboi_tools_git.tools import DIFF_LIMIT, GitCommitArgs

pytestmark = pytest.mark.anyio

Git = Callable[..., str]
Call = Callable[..., Awaitable[str]]
Context = Callable[..., ToolContext]


# -- git_status ---------------------------------------------------------------------


async def test_status_groups_staged_unstaged_and_untracked(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], git: Git, call: Call
) -> None:
    (repo / "a.txt").write_text("alpha, changed\n")
    (repo / "new.txt").write_text("new\n")
    git(repo, "add", "new.txt")
    (repo / "loose.txt").write_text("loose\n")
    (repo / "b.txt").unlink()

    out = await call(tools["git_status"], ctx)

    assert out.splitlines()[0] == "On branch main"
    assert "Staged (will be committed) (1):\n  added: new.txt" in out
    assert "Not staged (2):\n  modified: a.txt\n  deleted: b.txt" in out
    assert "Untracked (1):\n  loose.txt" in out
    assert "clean" not in out


async def test_status_of_a_clean_repository_and_of_one_without_commits(
    tmp_path: Path,
    repo: Path,
    ctx: ToolContext,
    tools: dict[str, Tool],
    git: Git,
    call: Call,
    context: Context,
) -> None:
    assert await call(tools["git_status"], ctx) == (
        "On branch main\nNothing to commit, working tree clean."
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    (empty / "x").write_text("x\n")
    out = await call(tools["git_status"], context(empty))
    assert out.startswith("On branch main (no commits yet)")
    assert "Untracked (1):\n  x" in out


async def test_status_shows_renames_and_ahead_behind(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], git: Git, call: Call
) -> None:
    git(repo, "branch", "base")
    git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    git(repo, "branch", "--set-upstream-to=base")
    git(repo, "mv", "a.txt", "renamed.txt")

    out = await call(tools["git_status"], ctx)

    assert out.splitlines()[0] == "On branch main, tracking base: ahead 1, behind 0"
    assert "renamed: a.txt -> renamed.txt" in out


async def test_status_caps_long_lists(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], call: Call
) -> None:
    for i in range(130):
        (repo / f"f{i:03}.txt").write_text("x\n")
    out = await call(tools["git_status"], ctx)
    assert "Untracked (130):" in out
    assert "  ... and 30 more" in out
    assert "f099.txt" in out and "f129.txt" not in out


# -- git_diff -------------------------------------------------------------------------


async def test_diff_unstaged_staged_and_by_path(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], git: Git, call: Call
) -> None:
    (repo / "a.txt").write_text("alpha, staged\n")
    git(repo, "add", "a.txt")
    (repo / "b.txt").write_text("bravo, unstaged\n")

    unstaged = await call(tools["git_diff"], ctx)
    staged = await call(tools["git_diff"], ctx, staged=True)
    only_a = await call(tools["git_diff"], ctx, paths=["a.txt", "b.txt"], staged=True)
    only_b = await call(tools["git_diff"], ctx, paths=["b.txt"])

    assert "+bravo, unstaged" in unstaged and "alpha" not in unstaged
    assert "+alpha, staged" in staged and "bravo" not in staged
    assert " b.txt | 2 +-" in unstaged  # the --stat summary comes first
    assert only_a == staged
    assert only_b == unstaged
    assert await call(tools["git_diff"], ctx, paths=["a.txt"]) == (
        "No unstaged changes in the given paths (untracked files never show here: see git_status)."
    )


async def test_diff_context_lines(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], git: Git, call: Call
) -> None:
    (repo / "long.txt").write_text("".join(f"line {i}\n" for i in range(20)))
    git(repo, "add", "long.txt")
    git(repo, "commit", "-q", "-m", "long")
    (repo / "long.txt").write_text(
        "".join(f"line {i}\n" if i != 10 else "changed\n" for i in range(20))
    )
    narrow = await call(tools["git_diff"], ctx, context_lines=0)
    wide = await call(tools["git_diff"], ctx, context_lines=5)
    assert "@@ -11 +11 @@" in narrow and "\n line 9" not in narrow
    assert "@@ -6,11 +6,11 @@" in wide and " line 5" in wide and " line 15" in wide


async def test_a_long_diff_is_cut_with_a_note(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], git: Git, call: Call
) -> None:
    (repo / "big.txt").write_text("".join(f"line number {i}\n" for i in range(20_000)))
    out = await call(tools["git_diff"], ctx, paths=[])
    assert "No unstaged" in out  # control: untracked, not in the diff
    git(repo, "add", "-N", "big.txt")

    out = await call(tools["git_diff"], ctx)

    body, note = out.rsplit("\n", 1)
    assert note.startswith("[diff truncated: ") and "narrow it with paths" in note
    assert len(body.encode()) <= DIFF_LIMIT
    assert body.endswith(tuple(f"{i}" for i in range(10)))  # cut at a line's end
    assert "+line number 0\n" in body


# -- git_log --------------------------------------------------------------------------


async def test_log_one_line_per_commit_newest_first(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], git: Git, call: Call
) -> None:
    (repo / "a.txt").write_text("alpha 2\n")
    git(repo, "commit", "-q", "-am", "second: touch a")
    (repo / "b.txt").write_text("bravo 2\n")
    git(repo, "commit", "-q", "-am", "third: touch b")
    hashes = git(repo, "log", "--format=%h").split()
    date = git(repo, "log", "-1", "--format=%ad", "--date=short").strip()

    out = await call(tools["git_log"], ctx)
    two = await call(tools["git_log"], ctx, max_count=2)
    for_a = await call(tools["git_log"], ctx, paths=["a.txt"])

    assert out.splitlines() == [
        f"{hashes[0]} {date} (Tester) third: touch b",
        f"{hashes[1]} {date} (Tester) second: touch a",
        f"{hashes[2]} {date} (Tester) first",
    ]
    assert two.splitlines()[:2] == out.splitlines()[:2]
    assert two.splitlines()[2] == "[the newest 2; raise max_count to see older ones]"
    assert [line.split()[0] for line in for_a.splitlines()] == [hashes[1], hashes[2]]


async def test_log_without_commits_and_for_an_untouched_path(
    tmp_path: Path, ctx: ToolContext, tools: dict[str, Tool], git: Git, call: Call, context: Context
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    assert await call(tools["git_log"], context(empty)) == "No commits yet."
    assert await call(tools["git_log"], ctx, paths=["never.txt"]) == (
        "No commits touch the given paths."
    )


# -- git_commit -----------------------------------------------------------------------


async def test_commit_selected_paths_only(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], git: Git, call: Call
) -> None:
    (repo / "a.txt").write_text("alpha 2\n")
    (repo / "b.txt").write_text("bravo 2\n")
    (repo / "c.txt").write_text("charlie\n")  # new: staged by the tool itself
    (repo / "d.txt").write_text("delta\n")
    git(repo, "add", "d.txt")  # staged before, but not selected: stays out

    out = await call(
        tools["git_commit"],
        ctx,
        message="Update a, add c\n\nWith a body.",
        paths=["a.txt", "c.txt"],
    )

    head = git(repo, "rev-parse", "HEAD").strip()
    assert out.splitlines()[0] == f"Committed {head} on main: Update a, add c"
    assert "2 file(s):\n  M a.txt\n  A c.txt" in out
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["a.txt", "c.txt"]
    assert git(repo, "log", "-1", "--format=%B").strip() == "Update a, add c\n\nWith a body."
    remaining = git(repo, "status", "--porcelain")
    assert " M b.txt" in remaining and "A  d.txt" in remaining


async def test_commit_all_tracked_changes(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], git: Git, call: Call
) -> None:
    (repo / "a.txt").write_text("alpha 2\n")
    (repo / "b.txt").unlink()
    (repo / "untracked.txt").write_text("u\n")
    before = git(repo, "rev-parse", "HEAD").strip()

    out = await call(tools["git_commit"], ctx, message="All tracked", all=True)

    head = git(repo, "rev-parse", "HEAD").strip()
    assert head != before and head in out.splitlines()[0]
    assert git(repo, "show", "--name-status", "--format=", "HEAD").split() == [
        "M",
        "a.txt",
        "D",
        "b.txt",
    ]
    assert git(repo, "status", "--porcelain") == "?? untracked.txt\n"


async def test_commit_what_is_staged_with_the_configured_identity(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], git: Git, call: Call
) -> None:
    (repo / "a.txt").write_text("alpha 2\n")
    (repo / "b.txt").write_text("bravo 2\n")
    git(repo, "add", "b.txt")
    # A work-tree .gitconfig (HOME is the workdir) must not decide who commits.
    (repo / ".gitconfig").write_text("[user]\n\tname = Mallory\n\temail = m@example.invalid\n")
    git(repo, "config", "user.name", "Repo Config")

    out = await call(tools["git_commit"], ctx, message="Staged only")

    assert git(repo, "rev-parse", "HEAD").strip() in out
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["b.txt"]
    assert git(repo, "log", "-1", "--format=%an <%ae> / %cn <%ce>").strip() == (
        "Ada Agent <ada@example.invalid> / Ada Agent <ada@example.invalid>"
    )


async def test_the_message_goes_in_verbatim_and_never_as_an_option(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], git: Git, call: Call
) -> None:
    before = git(repo, "rev-parse", "HEAD").strip()
    (repo / "a.txt").write_text("alpha 2\n")
    message = "--amend\n\n# not a comment\n$(touch pwned) `id`"

    await call(tools["git_commit"], ctx, message=message, all=True)

    assert git(repo, "log", "-1", "--format=%B").strip() == message
    assert git(repo, "rev-parse", "HEAD~1").strip() == before  # a new commit, not an amend
    assert not (repo / "pwned").exists()


async def test_commit_refusals(
    repo: Path, ctx: ToolContext, tools: dict[str, Tool], call: Call
) -> None:
    commit = tools["git_commit"]
    for empty in ("", "   \n\t"):
        with pytest.raises(ToolArgumentError, match="message"):
            commit.parse_arguments({"message": empty})
    # Even a caller that skips validation gets a refusal.
    with pytest.raises(ToolError, match="empty"):
        await commit(GitCommitArgs.model_construct(message=" ", paths=None, all=False), ctx)
    (repo / "a.txt").write_text("alpha 2\n")
    with pytest.raises(ToolError, match="not both"):
        await call(commit, ctx, message="x", paths=["a.txt"], all=True)
    with pytest.raises(ToolError, match="nothing to commit"):
        await call(commit, ctx, message="nothing staged")
    with pytest.raises(ToolError, match="did not match"):
        await call(commit, ctx, message="x", paths=["missing.txt"])
    # Control: the same change commits with a message.
    assert "Committed" in await call(commit, ctx, message="x", paths=["a.txt"])
    with pytest.raises(ToolError, match="nothing to commit"):
        await call(commit, ctx, message="again", all=True)


async def test_the_tools_need_a_repository(
    tmp_path: Path, tools: dict[str, Tool], call: Call, context: Context
) -> None:
    bare = tmp_path / "plain"
    bare.mkdir()
    for name, arguments in (
        ("git_status", {}),
        ("git_diff", {}),
        ("git_log", {}),
        ("git_commit", {"message": "x", "all": True}),
    ):
        with pytest.raises(ToolError, match="no git repository in the working directory"):
            await call(tools[name], context(bare), **arguments)


async def test_a_workdir_that_is_a_repository_made_by_make_repo_has_files(
    tmp_path: Path, git: Git, make_repo: Callable[..., Path]
) -> None:
    # Sanity of the fixture the other tests rely on.
    made = make_repo(tmp_path / "r", {"x/y.txt": "y\n"})
    assert git(made, "ls-files").split() == ["x/y.txt"]
