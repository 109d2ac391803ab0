"""The four git tools. Each runs git only through ``ctx.run_process`` (the session's sandbox).

Reads (``git_status``, ``git_diff``, ``git_log``) are ``safe`` and idempotent:
they change nothing a user would see (optional index locks are off).
``git_commit`` is ``moderate`` and not idempotent: it stages and records a new
commit — a second call makes another commit or fails with nothing to commit —
but it never rewrites or drops history, so it is not ``destructive``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from koboi.errors import ToolError
from koboi.tools import Risk, Tool, ToolContext
from koboi_tools_git.porcelain import parse_status, summarize
from koboi_tools_git.repository import (
    MAX_PATHS,
    first_lines,
    open_repository,
    pathspecs,
    truncation,
    workdir_of,
)
from koboi_tools_git.settings import ToolsGitSection

#: Bytes of diff shown before the rest is cut (with a note saying so).
DIFF_LIMIT = 60_000
#: Most commits git_log lists.
MAX_LOG = 200
#: Longest commit message accepted.
MAX_MESSAGE = 20_000
#: Most committed files listed after a commit.
MAX_COMMITTED_LISTED = 50

Path = Annotated[str, StringConstraints(min_length=1, max_length=4096)]
_PATHS_HELP = (
    "Paths inside the working directory (relative, or absolute below it); each is taken "
    "literally (no globs)."
)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _GitTool(Tool):
    """A git tool bound to the ``tools_git`` settings it was made with."""

    def __init__(self, settings: ToolsGitSection | None = None) -> None:
        self.settings = settings or ToolsGitSection()


# -- git_status ---------------------------------------------------------------------


class GitStatusArgs(_Args):
    """git_status takes no arguments."""


class GitStatus(_GitTool):
    name = "git_status"
    description = (
        "Show the git status of the working directory's repository: branch, ahead/behind its "
        "upstream, staged and unstaged changes, untracked files and conflicts."
    )
    args_model = GitStatusArgs
    risk = Risk.SAFE
    idempotent = True

    async def invoke(self, args: GitStatusArgs, ctx: ToolContext) -> str:
        repo = await open_repository(ctx, self.settings)
        result = await repo.run(
            "--no-optional-locks",
            "status",
            "--porcelain=v2",
            "--branch",
            "--untracked-files=normal",
            "--ignore-submodules=dirty",
        )
        if result.returncode != 0:
            raise ToolError(f"git status failed: {first_lines(result.stderr)}")
        text, dropped = truncation(result)
        return summarize(parse_status(text, truncated=dropped > 0))


# -- git_diff -------------------------------------------------------------------------


class GitDiffArgs(_Args):
    staged: bool = Field(
        default=False,
        description="false: changes not yet staged (work tree vs index). true: staged changes "
        "(index vs HEAD), i.e. what git_commit would record.",
    )
    paths: list[Path] = Field(
        default_factory=list, max_length=MAX_PATHS, description=_PATHS_HELP + " Empty: all."
    )
    context_lines: int = Field(
        default=3, ge=0, le=100, description="Unchanged lines shown around each change."
    )


class GitDiff(_GitTool):
    name = "git_diff"
    description = (
        "Show a diff of the working directory's repository: unstaged changes, or staged ones "
        f"with staged=true, optionally limited to some paths. Long diffs are cut at "
        f"{DIFF_LIMIT:,} bytes with a note. Untracked files are not shown (see git_status)."
    )
    args_model = GitDiffArgs
    risk = Risk.SAFE
    idempotent = True

    async def invoke(self, args: GitDiffArgs, ctx: ToolContext) -> str:
        specs = pathspecs(workdir_of(ctx), args.paths)  # refused before git runs
        repo = await open_repository(ctx, self.settings)
        argv = [
            "--no-optional-locks",
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--ignore-submodules=dirty",
            "--stat=200",  # wide enough that paths are not elided
            "--patch",
            f"--unified={args.context_lines}",
        ]
        if args.staged:
            argv.append("--cached")
        result = await repo.run(*argv, "--", *specs, max_output=DIFF_LIMIT)
        if result.returncode != 0:
            raise ToolError(f"git diff failed: {first_lines(result.stderr)}")
        text, dropped = truncation(result)
        which = "staged" if args.staged else "unstaged"
        if not text.strip():
            where = " in the given paths" if specs else ""
            hint = "" if args.staged else " (untracked files never show here: see git_status)"
            return f"No {which} changes{where}{hint}."
        if dropped:
            text = text[: text.rfind("\n") + 1] if "\n" in text else text
            text += (
                f"[diff truncated: {dropped:,} more bytes not shown; narrow it with paths or "
                "fewer context_lines]"
            )
        return text


# -- git_log ----------------------------------------------------------------------------


class GitLogArgs(_Args):
    max_count: int = Field(
        default=20, ge=1, le=MAX_LOG, description="Most commits to list, newest first."
    )
    paths: list[Path] = Field(
        default_factory=list,
        max_length=MAX_PATHS,
        description=_PATHS_HELP + " Only commits touching them. Empty: all.",
    )


class GitLog(_GitTool):
    name = "git_log"
    description = (
        "List recent commits of the current branch, newest first, one per line: short hash, "
        "date, (author), subject. Optionally only commits touching some paths."
    )
    args_model = GitLogArgs
    risk = Risk.SAFE
    idempotent = True

    async def invoke(self, args: GitLogArgs, ctx: ToolContext) -> str:
        specs = pathspecs(workdir_of(ctx), args.paths)  # refused before git runs
        repo = await open_repository(ctx, self.settings)
        # A fixed format: nothing from the model ever reaches --format.
        result = await repo.run(
            "--no-optional-locks",
            "log",
            "--no-color",
            "--no-decorate",
            "--date=short",
            "--format=%h%x09%ad%x09%an%x09%s",
            f"--max-count={args.max_count}",
            "--",
            *specs,
        )
        if result.returncode != 0:
            if "does not have any commits yet" in result.stderr:
                return "No commits yet."
            raise ToolError(f"git log failed: {first_lines(result.stderr)}")
        lines = []
        for line in result.stdout.splitlines():
            short, date, author, subject = [*line.split("\t", 3), "", "", ""][:4]
            lines.append(f"{short} {date} ({author}) {subject}")
        if not lines:
            return "No commits touch the given paths." if specs else "No commits yet."
        if len(lines) == args.max_count:
            lines.append(f"[the newest {args.max_count}; raise max_count to see older ones]")
        return "\n".join(lines)


# -- git_commit -------------------------------------------------------------------------


class GitCommitArgs(_Args):
    message: str = Field(
        min_length=1,
        max_length=MAX_MESSAGE,
        description="The commit message: a subject line, optionally a blank line and a body.",
    )
    paths: list[Path] | None = Field(
        default=None,
        max_length=MAX_PATHS,
        description=_PATHS_HELP + " Stage them (new, changed or deleted) and commit exactly "
        "them, whatever else is staged. Omit to commit what is staged.",
    )
    all: bool = Field(
        default=False,
        description="Stage and commit every change to tracked files (not untracked ones). "
        "Not together with paths.",
    )

    @field_validator("message")
    @classmethod
    def _has_text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the commit message is empty")
        if "\0" in value:
            raise ValueError("the commit message contains a NUL byte")
        return value


class GitCommit(_GitTool):
    name = "git_commit"
    description = (
        "Record a commit in the working directory's repository and report its hash. Commits "
        "what is staged; or, with paths, stages and commits exactly those paths; or, with "
        "all=true, every change to tracked files. Hooks never run."
    )
    args_model = GitCommitArgs
    risk = Risk.MODERATE
    idempotent = False

    async def invoke(self, args: GitCommitArgs, ctx: ToolContext) -> str:
        if args.all and args.paths:
            raise ToolError("give either paths or all=true, not both")
        if not args.message.strip():  # also when called without parse_arguments
            raise ToolError("refused: the commit message is empty")
        specs = pathspecs(workdir_of(ctx), args.paths or [])  # refused before git runs
        repo = await open_repository(ctx, self.settings)
        if specs:
            # Stage them first: a new file must be known to git before commit --only.
            await repo.check("add", "--", *specs)
        argv = [
            "commit",
            "--quiet",
            "--no-verify",
            "--no-gpg-sign",
            "--cleanup=whitespace",
            "--file=-",  # the message on stdin: never a shell, never an option
        ]
        if args.all:
            argv.append("--all")
        if specs:
            argv += ["--only", "--", *specs]
        result = await repo.run(*argv, input=args.message.encode("utf-8"))
        if result.returncode != 0:
            said = first_lines(result.stderr) or first_lines(result.stdout)
            if any(
                words in result.stdout
                for words in ("nothing to commit", "nothing added to commit", "no changes added")
            ):
                last = [line for line in result.stdout.splitlines() if line.strip()][-1]
                raise ToolError(f"nothing to commit: {last}")
            raise ToolError(f"git commit failed: {said}")
        head, branch = (await repo.check("rev-parse", "HEAD", "--abbrev-ref", "HEAD")).split()[:2]
        files = (
            await repo.check(
                "diff-tree", "--no-commit-id", "--name-status", "-r", "--root", "--no-renames", head
            )
        ).splitlines()
        subject = args.message.strip().splitlines()[0]
        where = f"on {branch}" if branch != "HEAD" else "on a detached HEAD"
        out = [f"Committed {head} {where}: {subject}", f"{len(files)} file(s):"]
        out += [f"  {line.replace(chr(9), ' ', 1)}" for line in files[:MAX_COMMITTED_LISTED]]
        if len(files) > MAX_COMMITTED_LISTED:
            out.append(f"  ... and {len(files) - MAX_COMMITTED_LISTED} more")
        return "\n".join(out)


TOOLS: tuple[type[_GitTool], ...] = (GitStatus, GitDiff, GitLog, GitCommit)
