"""The nine tools, built for one agent from its ``tools_fs`` settings.

Each tool is a thin typed front of a :class:`~koboi_tools_fs.workspace.Workspace`
method on the calling session's working directory (``ctx.workdir``; the
process's own directory under a passthrough sandbox without one). They are
sync functions run in a worker thread, since file system calls block.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from pydantic import Field

from koboi.tools import FunctionTool, Risk, ToolContext, tool
from koboi_tools_fs.config import FsSettings
from koboi_tools_fs.searching import MAX_LINE_CHARS
from koboi_tools_fs.workspace import MAX_PATTERN_CHARS, Workspace

#: Every tool this plugin provides, by name.
TOOL_NAMES = (
    "read_file",
    "write_file",
    "edit_file",
    "apply_patch",
    "list_dir",
    "glob",
    "grep",
    "delete_file",
    "move_file",
)

_PATHS = (
    "Paths are relative to the session's working directory (an absolute path must lie "
    "inside it); '..', symlinks leading out and paths outside are refused."
)


def workdir_of(ctx: ToolContext) -> Path:
    """The directory the tools of this call are confined to."""
    return Path(ctx.workdir) if ctx.workdir is not None else Path.cwd()


def make_tools(settings: FsSettings | None = None) -> dict[str, FunctionTool]:
    """All nine tools, with ``settings`` (the defaults when None)."""
    settings = settings or FsSettings()
    return {name: _BUILDERS[name](settings) for name in TOOL_NAMES}


def make_tool(name: str, settings: FsSettings | None = None) -> FunctionTool:
    """The tool ``name`` (one of :data:`TOOL_NAMES`)."""
    return _BUILDERS[name](settings or FsSettings())


def _read_file(settings: FsSettings) -> FunctionTool:
    @tool(
        name="read_file",
        risk=Risk.SAFE,
        idempotent=True,
        description=(
            "Read a text file, one page at a time. Pages are counted in lines: offset is the "
            "number of lines to skip, limit the most lines to return; one page is at most "
            f"{settings.max_read_bytes:,} bytes. When the file goes on, the page ends with a "
            "note saying how many lines are left and the offset to call again with. Binary "
            f"files are refused; invalid UTF-8 is shown as U+FFFD. {_PATHS}"
        ),
    )
    def read_file(
        path: str,
        ctx: ToolContext,
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1)] | None = None,
    ) -> str:
        """Read a page of a text file.

        Args:
            path: The file to read, e.g. "src/main.py".
            offset: Lines to skip before the page starts (0: from the first line).
            limit: Most lines to return (default: as many as fit in one page).
        """
        return Workspace(workdir_of(ctx), settings).read_file(path, offset, limit)

    return read_file


def _write_file(settings: FsSettings) -> FunctionTool:
    @tool(
        name="write_file",
        risk=Risk.MODERATE,
        idempotent=True,
        description=(
            "Create a file or replace its whole content with the given text (UTF-8), "
            "atomically: readers see the old or the new file, never half of it. Missing parent "
            f"directories are created. At most {settings.max_write_bytes:,} bytes. To change "
            f"part of a file, use edit_file or apply_patch. {_PATHS}"
        ),
    )
    def write_file(path: str, content: str, ctx: ToolContext, create_dirs: bool = True) -> str:
        """Write a whole file.

        Args:
            path: The file to write, e.g. "notes/todo.md".
            content: The complete new content of the file.
            create_dirs: Create missing parent directories (default true).
        """
        return Workspace(workdir_of(ctx), settings).write_file(path, content, create_dirs)

    return write_file


def _edit_file(settings: FsSettings) -> FunctionTool:
    @tool(
        name="edit_file",
        risk=Risk.MODERATE,
        idempotent=False,
        description=(
            "Replace an exact piece of text in a file. old_text must occur exactly once "
            "(include enough surrounding lines to make it unique), unless replace_all is "
            "true, which replaces every occurrence. Whitespace and indentation must match. "
            f"Reports how many replacements were made. {_PATHS}"
        ),
    )
    def edit_file(
        path: str,
        old_text: str,
        new_text: str,
        ctx: ToolContext,
        replace_all: bool = False,
    ) -> str:
        """Replace exact text in a file.

        Args:
            path: The file to change.
            old_text: The exact text to replace, as it is in the file.
            new_text: The text to put in its place (may be empty to delete old_text).
            replace_all: Replace every occurrence instead of requiring exactly one.
        """
        return Workspace(workdir_of(ctx), settings).edit_file(path, old_text, new_text, replace_all)

    return edit_file


def _apply_patch(settings: FsSettings) -> FunctionTool:
    @tool(
        name="apply_patch",
        risk=Risk.MODERATE,
        idempotent=False,
        description=(
            "Apply a unified diff (as made by 'diff -u' or 'git diff') to files in the working "
            "directory: '--- a/path' and '+++ b/path' headers, then '@@ -l,n +l,n @@' hunks of "
            "' ' context, '-' removed and '+' added lines. '--- /dev/null' creates a file, "
            "'+++ /dev/null' deletes one. All or nothing: if any hunk of any file does not "
            "match the file exactly, no file is changed and the error says where. "
            f"{_PATHS}"
        ),
    )
    def apply_patch(patch: str, ctx: ToolContext) -> str:
        """Apply a unified diff.

        Args:
            patch: The unified diff text, possibly for several files.
        """
        return Workspace(workdir_of(ctx), settings).apply_patch(patch)

    return apply_patch


def _list_dir(settings: FsSettings) -> FunctionTool:
    @tool(
        name="list_dir",
        risk=Risk.SAFE,
        idempotent=True,
        description=(
            "List a directory: sub-directories end with '/', files show their size, symlinks "
            f"show their target (they are not followed). At most {settings.max_results:,} "
            f"entries, sorted by name. {_PATHS}"
        ),
    )
    def list_dir(ctx: ToolContext, path: str = ".") -> str:
        """List a directory.

        Args:
            path: The directory to list (default: the working directory).
        """
        return Workspace(workdir_of(ctx), settings).list_dir(path)

    return list_dir


def _glob(settings: FsSettings) -> FunctionTool:
    @tool(
        name="glob",
        risk=Risk.SAFE,
        idempotent=True,
        description=(
            "Find paths in the working directory matching a glob pattern: '*' and '?' match "
            "within one name, '[abc]' one character, '**' any number of directories (e.g. "
            "'**/*.py', 'src/**/test_*.py'). Directories end with '/'. Symlinks are never "
            f"followed. At most {settings.max_results:,} paths."
        ),
    )
    def glob(pattern: str, ctx: ToolContext) -> str:
        """Find paths by glob pattern.

        Args:
            pattern: The pattern, relative to the working directory, e.g. "**/*.md".
        """
        return Workspace(workdir_of(ctx), settings).glob(pattern)

    return glob


def _grep(settings: FsSettings) -> FunctionTool:
    @tool(
        name="grep",
        risk=Risk.SAFE,
        idempotent=True,
        description=(
            "Search files for a regular expression (Python syntax), line by line. Returns "
            "'path:line: text' for each matching line (long lines cut to "
            f"{MAX_LINE_CHARS} characters), at most {settings.max_results:,} matches; binary "
            "files and symlinks are skipped, and the result says when it was capped. "
            f"{_PATHS}"
        ),
    )
    def grep(
        pattern: Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_CHARS)],
        ctx: ToolContext,
        path: str = ".",
        include: str | None = None,
        ignore_case: bool = False,
    ) -> str:
        """Search file contents.

        Args:
            pattern: The regular expression to search for, e.g. "def \\w+_test".
            path: A directory to search recursively, or one file (default: everything).
            include: Only search files whose name matches this glob, e.g. "*.py".
            ignore_case: Match letters case-insensitively.
        """
        return Workspace(workdir_of(ctx), settings).grep(pattern, path, include, ignore_case)

    return grep


def _delete_file(settings: FsSettings) -> FunctionTool:
    @tool(
        name="delete_file",
        risk=Risk.DESTRUCTIVE,
        idempotent=False,
        description=(
            "Delete a file (a symlink is removed itself, never what it points to). Directories "
            f"are refused unless empty_dir is true and the directory is empty. {_PATHS}"
        ),
    )
    def delete_file(path: str, ctx: ToolContext, empty_dir: bool = False) -> str:
        """Delete a file.

        Args:
            path: The file to delete.
            empty_dir: Allow deleting an empty directory.
        """
        return Workspace(workdir_of(ctx), settings).delete_file(path, empty_dir)

    return delete_file


def _move_file(settings: FsSettings) -> FunctionTool:
    @tool(
        name="move_file",
        risk=Risk.MODERATE,
        idempotent=False,
        description=(
            "Move or rename a file (or a directory) within the working directory. Missing "
            "parent directories of the destination are created. An existing destination file "
            f"is replaced only when overwrite is true. {_PATHS}"
        ),
    )
    def move_file(source: str, destination: str, ctx: ToolContext, overwrite: bool = False) -> str:
        """Move or rename a file.

        Args:
            source: The path to move.
            destination: The new path (the full path, including the name).
            overwrite: Replace an existing file at the destination.
        """
        return Workspace(workdir_of(ctx), settings).move_file(source, destination, overwrite)

    return move_file


_BUILDERS: dict[str, Callable[[FsSettings], FunctionTool]] = {
    "read_file": _read_file,
    "write_file": _write_file,
    "edit_file": _edit_file,
    "apply_patch": _apply_patch,
    "list_dir": _list_dir,
    "glob": _glob,
    "grep": _grep,
    "delete_file": _delete_file,
    "move_file": _move_file,
}
