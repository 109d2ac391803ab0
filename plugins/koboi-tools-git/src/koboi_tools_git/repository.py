"""Running git on the session's repository, and only there, without running its code.

A repository in a model's working directory is the model's to shape: it can
write ``.git/hooks/*``, ``.git/config`` and (under ``restricted``, where HOME
is the workdir) ``~/.gitconfig``. Several of git's settings are *commands*
git runs on its own: hooks, ``core.fsmonitor``, filter drivers, external diff
and textconv drivers, GPG programs, transports. A read-only ``git status``
would then be code execution. So every call:

- starts from a minimal environment (``GIT_CONFIG_NOSYSTEM``,
  ``GIT_CONFIG_GLOBAL=/dev/null``, no prompts, no optional locks, no trace2
  targets, the configured identity) — and, because a sandbox may strip the
  ``GIT_CONFIG_*`` names (``restricted`` does), does not rely on it;
- overrides, with ``-c`` (which beats every config file), each setting that
  names a command git would run here: ``core.hooksPath=/dev/null``,
  ``core.fsmonitor=false``, ``protocol.*.allow=never``, no GPG signing or
  checking, no auto-maintenance, no submodule recursion;
- passes ``--no-ext-diff --no-textconv`` wherever a diff is produced;
- refuses outright a repository whose config (any scope) defines a filter
  driver command (``filter.*.clean/smudge/process``): git runs those while
  hashing the work tree, and no option turns them off;
- checks, with ``git rev-parse``, that the repository's top-level, git
  directory and common directory all lie inside the workdir (real paths,
  compared component by component), and from then on runs git with
  ``GIT_CEILING_DIRECTORIES`` at the workdir's parent, so git can never
  wander up into a repository above it;
- trusts the session's own workdir, and only it, against git's "dubious
  ownership" check (``-c safe.directory=<workdir>``): that check exists to
  stop a repository's config and hooks from running as someone else, which
  the points above already stop.

Model-supplied paths are checked with :func:`koboi_confine.paths.relative_parts`
and always passed after ``--``, as ``./``-prefixed literal pathspecs
(``--literal-pathspecs``): never an option, never pathspec magic or a glob.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from koboi.errors import ToolError
from koboi.sandbox import ProcessResult
from koboi.tools import ToolContext
from koboi_confine.paths import relative_parts
from koboi_tools_git.settings import ToolsGitSection

#: Wall-clock limit of one git process.
GIT_TIMEOUT = 30.0
#: What git may print before koboi stops reading (a diff has its own, smaller cap).
OUTPUT_LIMIT = 1_000_000
#: Most paths one call may name.
MAX_PATHS = 100

_TRANSPORTS = ("ext", "fd", "file", "git", "http", "https", "ssh")

#: Config overrides on every call; ``-c`` is read after every config file, so these win.
_OVERRIDES: tuple[str, ...] = (
    # Hooks and fsmonitor are programs in the repository: code execution.
    f"core.hooksPath={os.devnull}",
    "core.fsmonitor=false",
    # No transport at all (a partial clone would lazily fetch; ext:: runs commands);
    # per-protocol settings beat protocol.allow, so each is set too.
    "protocol.allow=never",
    *(f"protocol.{name}.allow=never" for name in _TRANSPORTS),
    "credential.helper=",
    # GPG programs are commands too.
    "commit.gpgSign=false",
    "log.showSignature=false",
    # Checking a submodule's work tree runs git inside it, under *its* config.
    "diff.ignoreSubmodules=dirty",
    "diff.submodule=short",
    "status.submoduleSummary=false",
    "submodule.recurse=false",
    # No background gc or maintenance after a commit.
    "maintenance.auto=false",
    "gc.auto=0",
    # Readable paths (control characters are still quoted), no colour codes.
    "core.quotePath=false",
    "color.ui=false",
    "advice.addIgnoredFile=false",
)

#: Config keys whose values are commands git runs while reading the work tree,
#: which no option turns off: a repository that defines one is refused.
_UNSTOPPABLE_COMMANDS = r"^filter\..+\.(clean|smudge|process)$"

_TRUNCATED = re.compile(r"\n\[output truncated: (\d+) bytes dropped\]$")


def _inside(path: Path, root: Path) -> bool:
    """True when real ``path`` is ``root`` or below it, compared component by component."""
    parts = PurePosixPath(os.path.realpath(path)).parts
    root_parts = PurePosixPath(os.path.realpath(root)).parts
    return parts[: len(root_parts)] == root_parts


def pathspecs(workdir: Path, paths: Sequence[str]) -> list[str]:
    """Model-given paths as literal pathspecs inside ``workdir``, or ``PathRefused``.

    Each is ``./<components>`` (``.`` for the workdir itself), so it can never
    start with ``-`` even where git might read it as an option.
    """
    if len(paths) > MAX_PATHS:
        raise ToolError(f"at most {MAX_PATHS} paths per call (got {len(paths)})")
    specs = []
    for path in paths:
        parts = relative_parts(workdir, path)
        specs.append("./" + "/".join(parts) if parts else ".")
    return specs


def first_lines(text: str, limit: int = 800) -> str:
    """git's message for the model: no hint lines, not too long."""
    lines = [
        line for line in text.strip().splitlines() if line.strip() and not line.startswith("hint:")
    ]
    joined = "\n".join(lines)
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


@dataclass(frozen=True)
class Repository:
    """The checked repository of one tool call: run git commands in it."""

    ctx: ToolContext
    workdir: Path
    settings: ToolsGitSection

    def argv(self, args: Sequence[str]) -> list[str]:
        head = ["git", "--no-pager", "--literal-pathspecs"]
        for setting in (
            *_OVERRIDES,
            # Only the session's own workdir; never '*', never written to a file.
            f"safe.directory={self.workdir}",
            # The environment's identity wins over config; this is for a sandbox
            # that would strip the environment's.
            f"user.name={self.settings.author_name}",
            f"user.email={self.settings.author_email}",
        ):
            head += ["-c", setting]
        return [*head, *args]

    def environment(self, *, ceiling: bool = True) -> dict[str, str]:
        name, email = self.settings.author_name, self.settings.author_email
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(self.workdir),
            "LC_ALL": "C",
            # Read by git where the sandbox lets them through (not under restricted,
            # which strips GIT_CONFIG*: the -c overrides above do not depend on them).
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "XDG_CONFIG_HOME": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_NO_LAZY_FETCH": "1",
            "GIT_EDITOR": ":",
            "GIT_PAGER": "cat",
            # trace2 targets come from global config and can name any file or socket.
            "GIT_TRACE2": "0",
            "GIT_TRACE2_EVENT": "0",
            "GIT_TRACE2_PERF": "0",
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
        }
        parent = self.workdir.parent
        if ceiling and parent != self.workdir:
            # git looks for .git in the workdir and never climbs into its parent.
            env["GIT_CEILING_DIRECTORIES"] = str(parent)
        return env

    async def run(
        self,
        *args: str,
        input: bytes | None = None,
        max_output: int = OUTPUT_LIMIT,
        ceiling: bool = True,
    ) -> ProcessResult:
        """Run ``git <args>`` through the session's sandbox, in the workdir."""
        try:
            result = await self.ctx.run_process(
                self.argv(args),
                cwd=self.workdir,
                env=self.environment(ceiling=ceiling),
                timeout=GIT_TIMEOUT,
                input=input,
                max_output=max_output,
            )
        except FileNotFoundError:
            raise ToolError("git is not installed where the tools run") from None
        if result.timed_out:
            raise ToolError(f"git {args[0]} did not finish within {GIT_TIMEOUT:g} seconds")
        return result

    async def check(self, *args: str, input: bytes | None = None) -> str:
        """Run git; its stdout, or a :class:`ToolError` with its message when it fails."""
        result = await self.run(*args, input=input)
        if result.returncode != 0:
            raise ToolError(f"git {args[0]} failed: {first_lines(result.stderr or result.stdout)}")
        return result.stdout


def truncation(result: ProcessResult) -> tuple[str, int]:
    """stdout without the sandbox's truncation marker, and how many bytes it dropped."""
    match = _TRUNCATED.search(result.stdout)
    if match is None:
        return result.stdout, 0
    return result.stdout[: match.start()], int(match.group(1))


def workdir_of(ctx: ToolContext) -> Path:
    """The real path of the session's working directory."""
    # Real path: git reports real paths, and safe.directory is compared with one.
    return Path(os.path.realpath(ctx.workdir if ctx.workdir is not None else Path.cwd()))


async def open_repository(ctx: ToolContext, settings: ToolsGitSection) -> Repository:
    """The repository of the session's workdir, after checking it may be used at all."""
    workdir = workdir_of(ctx)
    repo = Repository(ctx, workdir, settings)
    # Without the ceiling, so that a repository above the workdir is *seen* and
    # refused by name rather than reported as missing.
    found = await repo.run(
        "rev-parse",
        "--path-format=absolute",
        "--show-toplevel",
        "--git-dir",
        "--git-common-dir",
        ceiling=False,
    )
    if found.returncode != 0:
        raise ToolError(_not_usable(workdir, found.stderr))
    lines = found.stdout.splitlines()
    if len(lines) != 3:
        raise ToolError(f"git rev-parse gave unexpected output: {first_lines(found.stdout)}")
    for what, path in zip(
        ("top-level", "git directory", "common git directory"), lines, strict=True
    ):
        if not _inside(Path(path), workdir):
            raise ToolError(
                f"refused: the repository's {what} {path!r} is outside the working directory "
                f"{str(workdir)!r}; the git tools only work on a repository inside the session's "
                "working directory"
            )
    await _refuse_repository_commands(repo)
    return repo


async def _refuse_repository_commands(repo: Repository) -> None:
    found = await repo.run(
        "config", "--show-origin", "--name-only", "--get-regexp", _UNSTOPPABLE_COMMANDS
    )
    if found.returncode == 1:  # no such key: the normal case
        return
    if found.returncode != 0:
        raise ToolError(f"git cannot read this repository's config: {first_lines(found.stderr)}")
    keys = []
    for line in found.stdout.splitlines():
        origin, _, key = line.partition("\t")
        keys.append(f"{key} (from {origin})")
    raise ToolError(
        "refused: git config defines a filter driver, a command git would run on the files "
        f"whatever the tools ask: {'; '.join(keys[:5])}. Remove it (git config --unset) to use "
        "the git tools here."
    )


def _not_usable(workdir: Path, stderr: str) -> str:
    message = first_lines(stderr)
    if "not a git repository" in message:
        return (
            f"no git repository in the working directory {str(workdir)!r} (git: {message}); "
            "create one with 'git init' first"
        )
    if "dubious ownership" in message:
        return (
            "refused: the repository found belongs to another user and is not the session's "
            f"working directory {str(workdir)!r} (git: {message.splitlines()[0]})"
        )
    if "work tree" in message:
        return f"the working directory {str(workdir)!r} has no work tree (a bare repository?)"
    return f"git cannot use the working directory {str(workdir)!r}: {message}"
