"""The nine file operations, on one session's working directory.

Every path a model gives is checked by :func:`koboi_confine.paths.relative_parts`
and resolved by :func:`koboi_confine.paths.open_inside` (in the kernel, beneath
the root, component by component, never by string prefix). What follows
works on directory descriptors only (see :mod:`koboi_tools_fs.fds`).
Failures the model should read are :class:`koboi.errors.ToolError`.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from koboi.errors import ToolError
from koboi_confine.paths import (
    Identity,
    PathRefused,
    open_inside,
    refuse_foreign_link,
    relative_parts,
    session_identity,
)
from koboi_tools_fs.config import FsSettings
from koboi_tools_fs.fds import (
    NEW_FILE_MODE,
    closing_fd,
    create_file,
    describe_os_error,
    discard,
    lstat_child,
    make_dirs,
    open_dir,
    open_existing_dir,
    open_parent,
    owner_for_new_files,
    read_regular,
    replace_file,
    reported,
    require_regular,
    write_temp,
)
from koboi_tools_fs.patching import PatchError, apply_hunks, parse_patch, split_lines
from koboi_tools_fs.reading import read_page
from koboi_tools_fs.searching import (
    MAX_DEPTH,
    MAX_SCANNED,
    Budget,
    GrepReport,
    glob,
    grep_file,
    grep_tree,
)

#: Longest regular expression grep accepts.
MAX_PATTERN_CHARS = 1000
_MAGIC = re.compile(r"[*?\[]")
# Permission bits a rewritten file keeps (never setuid, setgid or sticky).
_KEPT_MODE = 0o777


class Workspace:
    """File operations confined to ``root`` (a session's working directory)."""

    def __init__(self, root: Path, settings: FsSettings | None = None) -> None:
        self.root = root
        self.settings = settings or FsSettings()
        self._identity: Identity | None = None

    @property
    def identity(self) -> Identity:
        """Who the session is: what decides whether a hard-linked file may be opened."""
        if self._identity is None:
            self._identity = session_identity(self.root)
        return self._identity

    # -- helpers ---------------------------------------------------------------------

    def _file_parts(self, path: str) -> list[str]:
        """The components of a path that must name something *in* the root."""
        parts = relative_parts(self.root, path)
        if not parts:
            raise ToolError(
                f"{path!r} names the working directory itself; give the path of a file in it"
            )
        return parts

    def _owner_of(self, info: os.stat_result) -> tuple[int, int] | None:
        return (info.st_uid, info.st_gid) if os.geteuid() == 0 else None

    def _encode(self, text: str, shown: str) -> bytes:
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError(f"the new text of {shown!r} is not valid Unicode") from None
        limit = self.settings.max_write_bytes
        if len(data) > limit:
            raise ToolError(
                f"the new content of {shown!r} is {len(data):,} bytes; the limit is {limit:,} "
                "bytes (tools_fs.max_write_bytes)"
            )
        return data

    # -- reading ---------------------------------------------------------------------

    def read_file(self, path: str, offset: int = 0, limit: int | None = None) -> str:
        with reported(path):
            fd = open_inside(self.root, path, os.O_RDONLY | os.O_NONBLOCK)
        with closing_fd(fd):
            with reported(path):
                info = os.fstat(fd)
                require_regular(info, path)
            refuse_foreign_link(info, self.identity, path)
            return read_page(fd, path, offset=offset, limit=limit, cap=self.settings.max_read_bytes)

    def list_dir(self, path: str = ".") -> str:
        parts = relative_parts(self.root, path)
        fd = open_existing_dir(self.root, parts, path)
        names: list[str] = []
        with closing_fd(fd), reported(path):
            with os.scandir(fd) as listing:
                for item in listing:
                    names.append(item.name)
                    if len(names) >= MAX_SCANNED:
                        break  # a directory this large is listed in part
            names.sort()
            cap = self.settings.max_results
            shown = [_describe_entry(fd, name) for name in names[:cap]]
        if not names:
            return f"{path} is empty"
        total = f"{len(names):,}" if len(names) < MAX_SCANNED else f"at least {len(names):,}"
        head = f"{path}: {total} entr{'y' if len(names) == 1 else 'ies'}"
        if len(names) > cap:
            shown.append(
                f"[showing the first {cap:,} of {total} entries, sorted by name; "
                "use glob to find specific ones]"
            )
        return "\n".join([head, *shown])

    def glob(self, pattern: str) -> str:
        parts = relative_parts(self.root, pattern)
        if not parts:
            raise ToolError(f"the pattern {pattern!r} names the working directory itself")
        # Open the literal leading directories directly; walk only where the pattern is magic.
        literal = 0
        while literal < len(parts) - 1 and not _MAGIC.search(parts[literal]):
            literal += 1
        budget = Budget(max_results=self.settings.max_results)
        try:
            fd = open_dir(self.root, parts[:literal], pattern, missing_ok=True)
        except PathRefused:
            raise
        except ToolError:
            fd = None  # a file where the pattern wants a directory
        if fd is None:
            return f"no paths match {pattern!r}"
        with closing_fd(fd):
            found = glob(fd, parts[:literal], parts[literal:], budget)
        if not found:
            lines = [f"no paths match {pattern!r}"]
        else:
            lines = found[: budget.max_results]
            if len(found) > budget.max_results:
                lines.append(f"[capped at {budget.max_results:,} paths; narrow the pattern]")
        lines.extend(_budget_notes(budget))
        return "\n".join(lines)

    def grep(
        self,
        pattern: str,
        path: str = ".",
        include: str | None = None,
        ignore_case: bool = False,
    ) -> str:
        if len(pattern) > MAX_PATTERN_CHARS:
            raise ToolError(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
        parts = relative_parts(self.root, path)
        budget = Budget(max_results=self.settings.max_results)
        report = GrepReport()
        with reported(path):
            fd = open_inside(self.root, path, os.O_RDONLY | os.O_NONBLOCK)
        with closing_fd(fd), reported(path):
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                grep_tree(fd, parts, regex, include, budget, report, self.identity)
            elif stat.S_ISREG(info.st_mode):
                refuse_foreign_link(info, self.identity, path)
                grep_file(fd, "/".join(parts), regex, budget, report)
            else:
                raise ToolError(f"{path!r} is neither a directory nor a regular file")
        lines = report.matches[: budget.max_results]
        if not lines:
            lines = [f"no matches for {pattern!r} in {path!r} ({report.files:,} files searched)"]
        if len(report.matches) > budget.max_results:
            lines.append(
                f"[capped at {budget.max_results:,} matches; narrow the pattern, path or include]"
            )
        if report.binary:
            lines.append(f"[{report.binary:,} binary files skipped]")
        if report.linked:
            lines.append(
                f"[{report.linked:,} hard-linked files skipped: this session could not open "
                "them as itself]"
            )
        if report.long_lines:
            lines.append(f"[{report.long_lines:,} very long lines searched in their first MiB]")
        lines.extend(_budget_notes(budget))
        return "\n".join(lines)

    # -- writing ---------------------------------------------------------------------

    def write_file(self, path: str, content: str, create_dirs: bool = True) -> str:
        parts = self._file_parts(path)
        data = self._encode(content, path)
        owner = owner_for_new_files(self.root)
        parent = open_parent(self.root, parts, path, create=create_dirs, owner=owner)
        name = parts[-1]
        with closing_fd(parent), reported(path):
            existing = lstat_child(parent, name)
            if existing is not None:
                if stat.S_ISLNK(existing.st_mode):
                    raise PathRefused(
                        f"{path!r} is a symlink; write_file does not write through symlinks"
                    )
                require_regular(existing, path)
                refuse_foreign_link(existing, self.identity, path, write=True)
                mode = stat.S_IMODE(existing.st_mode) & _KEPT_MODE
                owner = self._owner_of(existing)
            else:
                mode = NEW_FILE_MODE
            replace_file(parent, name, data, mode=mode, owner=owner)
        what = "replaced its content" if existing is not None else "new file"
        return f"wrote {len(data):,} bytes to {path} ({what})"

    def edit_file(self, path: str, old_text: str, new_text: str, replace_all: bool = False) -> str:
        if not old_text:
            raise ToolError("old_text is empty; use write_file to create or overwrite a file")
        if old_text == new_text:
            raise ToolError("old_text and new_text are the same; the edit would change nothing")
        parts = self._file_parts(path)
        parent = open_parent(self.root, parts, path, create=False, owner=None)
        name = parts[-1]
        with closing_fd(parent):
            data, info = read_regular(
                parent, name, path, self.settings.max_write_bytes, self.identity
            )
            text = _decode_strict(data, path, "edit_file")
            count = text.count(old_text)
            if count == 0:
                raise ToolError(_not_found(text, old_text, path))
            if count > 1 and not replace_all:
                raise ToolError(
                    f"old_text occurs {count} times in {path!r}; include more of the "
                    "surrounding lines so that it occurs exactly once, or set replace_all=true "
                    "to replace every occurrence"
                )
            changed = text.replace(old_text, new_text, -1 if replace_all else 1)
            encoded = self._encode(changed, path)
            with reported(path):
                replace_file(
                    parent,
                    name,
                    encoded,
                    mode=stat.S_IMODE(info.st_mode) & _KEPT_MODE,
                    owner=self._owner_of(info),
                )
        done = count if replace_all else 1
        return f"replaced {done} occurrence{'s' if done != 1 else ''} in {path}"

    def apply_patch(self, patch: str) -> str:
        if len(patch) > self.settings.max_write_bytes:
            raise ToolError(
                f"the patch is longer than {self.settings.max_write_bytes:,} characters "
                "(tools_fs.max_write_bytes)"
            )
        try:
            files = parse_patch(patch)
        except PatchError as exc:
            raise ToolError(f"the patch was not applied: {exc}") from None
        plans: dict[tuple[str, ...], _Plan] = {}
        try:
            notes: list[str] = []
            for file_patch in files:
                shown = file_patch.path
                parts = self._file_parts(shown)
                plan = plans.get(tuple(parts))
                if plan is None:
                    plan = plans[tuple(parts)] = self._plan(parts, shown)
                if file_patch.old_path is None and plan.current is not None:
                    raise ToolError(
                        f"the patch was not applied: it creates {shown!r}, which already exists"
                    )
                if file_patch.old_path is not None and plan.current is None:
                    raise ToolError(f"the patch was not applied: {shown!r} does not exist")
                try:
                    lines, offsets = apply_hunks(
                        split_lines(plan.current or ""), file_patch.hunks, shown
                    )
                except PatchError as exc:
                    raise ToolError(
                        f"the patch was not applied (no file was changed): {exc}"
                    ) from None
                notes.extend(offsets)
                if file_patch.new_path is None:
                    if lines:
                        raise ToolError(
                            f"the patch was not applied: it deletes {shown!r} but its hunks "
                            f"leave {len(lines)} lines"
                        )
                    plan.current = None
                else:
                    plan.current = "".join(lines)
                for tag, _ in (line for hunk in file_patch.hunks for line in hunk.lines):
                    if tag == "+":
                        plan.added += 1
                    elif tag == "-":
                        plan.removed += 1
            changed = [plan for plan in plans.values() if plan.current != plan.original]
            if not changed:
                raise ToolError("the patch changes nothing")
            self._commit(changed)
        finally:
            for plan in plans.values():
                if plan.parent is not None:
                    os.close(plan.parent)
        summary = [f"patched {len(changed)} file{'s' if len(changed) != 1 else ''}:"]
        for plan in changed:
            if plan.original is None:
                what = f"created, {plan.added} lines"
            elif plan.current is None:
                what = "deleted"
            else:
                what = f"+{plan.added} -{plan.removed}"
            summary.append(f"  {plan.shown}: {what}")
        return "\n".join([*summary, *notes])

    def _plan(self, parts: list[str], shown: str) -> _Plan:
        """Open the file's directory (if it exists) and read the file (if it exists)."""
        parent = open_dir(self.root, parts[:-1], shown, missing_ok=True)
        plan = _Plan(parts=parts, shown=shown, parent=parent)
        if parent is None or lstat_child(parent, parts[-1]) is None:
            return plan
        data, info = read_regular(
            parent, parts[-1], shown, self.settings.max_write_bytes, self.identity
        )
        plan.original = plan.current = _decode_strict(data, shown, "apply_patch")
        plan.original_bytes = data
        plan.mode = stat.S_IMODE(info.st_mode) & _KEPT_MODE
        plan.owner = self._owner_of(info)
        return plan

    def _commit(self, changed: list[_Plan]) -> None:
        """Write every changed file, or none: temp files first, then renames, undone on failure."""
        created_dirs: list[tuple[int, str]] = []
        try:
            self._write_temps(changed, created_dirs)
            self._rename_all(changed, created_dirs)
        finally:
            for fd, _ in created_dirs:
                os.close(fd)

    def _write_temps(self, changed: list[_Plan], created_dirs: list[tuple[int, str]]) -> None:
        """Every new content in a temp file beside its target; on failure, none is left."""
        owner = owner_for_new_files(self.root)
        try:
            for plan in changed:
                if plan.current is None:
                    continue
                data = self._encode(plan.current, plan.shown)
                if plan.parent is None:
                    plan.parent = make_dirs(
                        self.root, plan.parts[:-1], plan.shown, owner, created_dirs
                    )
                with reported(plan.shown):
                    plan.tmp = write_temp(
                        plan.parent,
                        plan.parts[-1],
                        data,
                        mode=plan.mode,
                        owner=plan.owner if plan.original is not None else owner,
                    )
        except BaseException:  # all or nothing: an interrupted patch leaves no temp or dir
            _discard_temps(changed)
            _remove_dirs(created_dirs)
            raise

    def _rename_all(self, changed: list[_Plan], created_dirs: list[tuple[int, str]]) -> None:
        """Put every temp file in place (and delete what the patch deletes), or undo it all."""
        done: list[_Plan] = []
        for plan in changed:
            assert plan.parent is not None
            name = plan.parts[-1]
            try:
                if plan.current is None:
                    os.unlink(name, dir_fd=plan.parent)
                elif plan.original is None:
                    assert plan.tmp is not None
                    create_file(plan.parent, name, plan.tmp)  # never clobbers a new file
                else:
                    assert plan.tmp is not None
                    os.rename(plan.tmp, name, src_dir_fd=plan.parent, dst_dir_fd=plan.parent)
            except OSError as exc:
                _discard_temps(changed)
                restored = _undo(done)
                _remove_dirs(created_dirs)
                outcome = (
                    "the files it had already changed were restored"
                    if restored
                    else "some files it had already changed could NOT be restored"
                )
                raise ToolError(
                    f"the patch was not applied: writing {plan.shown!r} failed "
                    f"({describe_os_error(exc, plan.shown)}); {outcome}"
                ) from None
            plan.tmp = None
            done.append(plan)

    # -- deleting and moving -----------------------------------------------------------

    def delete_file(self, path: str, empty_dir: bool = False) -> str:
        parts = self._file_parts(path)
        parent = open_parent(self.root, parts, path, create=False, owner=None)
        name = parts[-1]
        with closing_fd(parent), reported(path):
            info = lstat_child(parent, name)
            if info is None:
                raise ToolError(f"{path!r} does not exist")
            if stat.S_ISDIR(info.st_mode):
                if not empty_dir:
                    raise ToolError(
                        f"{path!r} is a directory; delete_file deletes files (set "
                        "empty_dir=true to delete an empty directory)"
                    )
                os.rmdir(name, dir_fd=parent)
                return f"deleted the empty directory {path}"
            # unlinkat removes a symlink itself, never what it points to.
            os.unlink(name, dir_fd=parent)
        return f"deleted {'the symlink' if stat.S_ISLNK(info.st_mode) else 'file'} {path}"

    def move_file(self, source: str, destination: str, overwrite: bool = False) -> str:
        src_parts = self._file_parts(source)
        dst_parts = self._file_parts(destination)
        if dst_parts[: len(src_parts)] == src_parts:
            raise ToolError(
                f"cannot move {source!r} to {destination!r}, which is itself or inside it"
            )
        src_parent = open_parent(self.root, src_parts, source, create=False, owner=None)
        with closing_fd(src_parent):
            if lstat_child(src_parent, src_parts[-1]) is None:
                raise ToolError(f"{source!r} does not exist")
            owner = owner_for_new_files(self.root)
            dst_parent = open_parent(self.root, dst_parts, destination, create=True, owner=owner)
            with closing_fd(dst_parent), reported(destination):
                target = lstat_child(dst_parent, dst_parts[-1])
                if target is not None:
                    if stat.S_ISDIR(target.st_mode):
                        raise ToolError(
                            f"{destination!r} is an existing directory; give the full new path "
                            f"(e.g. {destination.rstrip('/')}/{src_parts[-1]})"
                        )
                    if not overwrite:
                        raise ToolError(
                            f"{destination!r} already exists; set overwrite=true to replace it"
                        )
                # Both names are single components relative to descriptors inside the root.
                os.rename(
                    src_parts[-1], dst_parts[-1], src_dir_fd=src_parent, dst_dir_fd=dst_parent
                )
        replaced = " (replaced the file that was there)" if target is not None else ""
        return f"moved {source} to {destination}{replaced}"


@dataclass
class _Plan:
    """What apply_patch will do to one file."""

    parts: list[str]
    shown: str
    parent: int | None
    original: str | None = None
    original_bytes: bytes = b""
    current: str | None = None
    mode: int = NEW_FILE_MODE
    owner: tuple[int, int] | None = None
    added: int = 0
    removed: int = 0
    tmp: str | None = None


def _undo(done: list[_Plan]) -> bool:
    """Put back the files a failed commit already changed; True when all were restored."""
    restored = True
    for plan in reversed(done):
        assert plan.parent is not None
        name = plan.parts[-1]
        try:
            if plan.original is None:
                os.unlink(name, dir_fd=plan.parent)
            else:
                replace_file(
                    plan.parent, name, plan.original_bytes, mode=plan.mode, owner=plan.owner
                )
        except OSError:
            restored = False
    return restored


def _discard_temps(plans: list[_Plan]) -> None:
    for plan in plans:
        if plan.tmp is not None and plan.parent is not None:
            discard(plan.parent, plan.tmp)
            plan.tmp = None


def _remove_dirs(created: list[tuple[int, str]]) -> None:
    for fd, name in reversed(created):
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=fd)


def _decode_strict(data: bytes, shown: str, tool: str) -> str:
    if b"\0" in data[:8192]:
        raise ToolError(f"{shown!r} is a binary file; {tool} changes text files only")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown!r} is not valid UTF-8 (byte {exc.start}); {tool} changes UTF-8 text only"
        ) from None


def _not_found(text: str, old_text: str, shown: str) -> str:
    message = f"old_text was not found in {shown!r}"
    if "\r\n" in text and "\n" in old_text and old_text.replace("\n", "\r\n") in text:
        return f"{message}: the file uses CRLF (\\r\\n) line endings; include the \\r"
    squeezed = " ".join(old_text.split())
    if squeezed and squeezed in " ".join(text.split()):
        return (
            f"{message} exactly; it occurs with different whitespace or indentation: read the "
            "file again and copy the text exactly"
        )
    return f"{message}; read the file again: the text must match exactly, whitespace included"


def _describe_entry(dir_fd: int, name: str) -> str:
    """One line of a listing: ``fstatat`` and ``readlinkat`` on the directory descriptor."""
    info = lstat_child(dir_fd, name)
    if info is None:
        return f"{name}  (vanished)"
    if stat.S_ISDIR(info.st_mode):
        return f"{name}/"
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            target = "?"
        return f"{name} -> {target}  (symlink, not followed by these tools)"
    if stat.S_ISREG(info.st_mode):
        return f"{name}  ({info.st_size:,} bytes)"
    return f"{name}  (special file)"


def _budget_notes(budget: Budget) -> list[str]:
    notes: list[str] = []
    if budget.stopped is not None:
        notes.append(f"[{budget.stopped}; results may be incomplete]")
    if budget.too_deep:
        notes.append(f"[{budget.too_deep:,} directories deeper than {MAX_DEPTH} levels skipped]")
    return notes
