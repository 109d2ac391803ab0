"""Directory descriptors: every file operation is made relative to one.

A model's path is resolved once, by :func:`koboi_confine.paths.open_inside`,
into a descriptor of a directory inside the working directory. From then on
each operation names a single component relative to that descriptor
(``openat``, ``fstatat``, ``unlinkat``, ``renameat``, ``mkdirat`` through the
``dir_fd=`` arguments of :mod:`os`) and never follows a symlink
(``O_NOFOLLOW``, ``follow_symlinks=False``). A symlink swapped in after the
descriptor was opened therefore cannot redirect the operation: the kernel
looks the name up in the directory the descriptor holds, and refuses to
follow a link there.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from koboi.errors import ToolError
from koboi_confine.paths import Identity, PathRefused, open_inside, refuse_foreign_link

#: How directories named by the model are opened (readable, so scandir works).
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY
_CHILD_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
_CHILD_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE_MODE = 0o644
NEW_DIR_MODE = 0o755


@contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    """Close ``fd`` when the block ends, however it ends."""
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def reported(shown: str) -> Iterator[None]:
    """Turn an ``OSError`` about ``shown`` into a :class:`ToolError` a model can act on."""
    try:
        yield
    except OSError as exc:
        raise describe_os_error(exc, shown) from None


def describe_os_error(exc: OSError, shown: str) -> ToolError:
    """One line about what went wrong, naming the model's path (never the host's)."""
    messages = {
        errno.ENOENT: f"{shown!r} does not exist",
        errno.EISDIR: f"{shown!r} is a directory",
        errno.ENOTDIR: f"a part of {shown!r} is not a directory",
        errno.EEXIST: f"{shown!r} already exists",
        errno.ENOTEMPTY: f"{shown!r} is a directory that is not empty",
        errno.EACCES: f"permission denied for {shown!r}",
        errno.EPERM: f"operation not permitted on {shown!r}",
        errno.ENAMETOOLONG: f"{shown!r}: a name in the path is too long",
        errno.ENOSPC: f"no space left on the device while writing {shown!r}",
        errno.EROFS: f"{shown!r} is on a read-only file system",
        errno.EINVAL: f"{shown!r}: invalid operation (moving a directory into itself?)",
    }
    if exc.errno == errno.ELOOP:
        return PathRefused(f"{shown!r} goes through a symlink; koboi does not follow it here")
    return ToolError(messages.get(exc.errno or 0, f"{shown!r}: {exc.strerror or exc}"))


def owner_for_new_files(root: Path) -> tuple[int, int] | None:
    """Who should own what the tools create: the owner of the working directory.

    Under the ``restricted`` sandbox koboi runs as root and a session's
    directory belongs to the unprivileged user its commands run as; files
    this plugin creates are given to that user too, so those commands can
    change them. ``None``: keep the process's own user.
    """
    if os.geteuid() != 0:
        return None
    info = os.stat(root)
    return None if info.st_uid == 0 else (info.st_uid, info.st_gid)


def open_dir(root: Path, parts: list[str], shown: str, *, missing_ok: bool = False) -> int | None:
    """A readable descriptor of the directory ``parts`` beneath ``root``.

    ``missing_ok``: None instead of an error when it does not exist.
    """
    try:
        return open_inside(root, "/".join(parts) or ".", DIR_FLAGS)
    except FileNotFoundError as exc:
        if missing_ok:
            return None
        raise describe_os_error(exc, shown) from None
    except NotADirectoryError:
        raise not_a_directory(root, parts, shown) from None
    except OSError as exc:
        raise describe_os_error(exc, shown) from None


def open_existing_dir(root: Path, parts: list[str], shown: str) -> int:
    """:func:`open_dir` for a directory that must exist."""
    fd = open_dir(root, parts, shown)
    assert fd is not None
    return fd


def not_a_directory(root: Path, parts: list[str], shown: str) -> ToolError:
    """Why ``parts`` is not a directory: a symlink (refused, not followed) or something else.

    The ``O_NOFOLLOW`` walk of :func:`open_inside` reports a symlink opened with
    ``O_DIRECTORY`` as ``ENOTDIR``; look at the last component to say which.
    """
    if parts:
        try:
            parent = open_inside(root, "/".join(parts[:-1]) or ".", DIR_FLAGS)
        except (OSError, ToolError):
            parent = None
        if parent is not None:
            with closing_fd(parent):
                info = lstat_child(parent, parts[-1])
            if info is not None and stat.S_ISLNK(info.st_mode):
                return PathRefused(
                    f"{shown!r}: {parts[-1]!r} is a symlink; koboi does not follow symlinks here"
                )
            if info is not None:
                return ToolError(f"{'/'.join(parts)!r} is not a directory")
    return ToolError(f"a part of {shown!r} is not a directory")


def open_child_dir(dir_fd: int, name: str) -> int:
    """The subdirectory ``name`` of ``dir_fd``; a symlink there is never followed."""
    return os.open(name, _CHILD_DIR, dir_fd=dir_fd)


def open_child_file(dir_fd: int, name: str) -> int:
    """The file ``name`` of ``dir_fd`` for reading; a symlink there is never followed."""
    return os.open(name, _CHILD_FILE, dir_fd=dir_fd)


def lstat_child(dir_fd: int, name: str) -> os.stat_result | None:
    """``fstatat(dir_fd, name, AT_SYMLINK_NOFOLLOW)``, or None when nothing is there."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def make_dirs(
    root: Path,
    parts: list[str],
    shown: str,
    owner: tuple[int, int] | None,
    created: list[tuple[int, str]] | None = None,
) -> int:
    """Create the directories ``parts`` beneath ``root`` one component at a time.

    Each component is made with ``mkdirat`` in the directory opened just
    before and then opened with ``O_NOFOLLOW``: a symlink met (or swapped in)
    on the way is refused, never followed. Returns a descriptor of the last
    directory. ``created`` collects ``(dup'd parent fd, name)`` of each new
    directory, so a caller can undo them.
    """
    current = open_existing_dir(root, [], shown)
    try:
        for part in parts:
            try:
                os.mkdir(part, NEW_DIR_MODE, dir_fd=current)
                made = True
            except FileExistsError:
                made = False
            except OSError as exc:
                raise describe_os_error(exc, shown) from None
            try:
                step = open_child_dir(current, part)
            except OSError as exc:
                info = lstat_child(current, part)
                if info is not None and stat.S_ISLNK(info.st_mode):
                    raise PathRefused(
                        f"{shown!r}: {part!r} is a symlink; koboi does not follow symlinks here"
                    ) from None
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise ToolError(f"{shown!r}: {part!r} exists and is not a directory") from None
                raise describe_os_error(exc, shown) from None
            if made:
                if owner is not None:
                    os.fchown(step, *owner)
                if created is not None:
                    created.append((os.dup(current), part))
            os.close(current)
            current = step
        return current
    except BaseException:  # the walk stopped (an error, a cancel): close its descriptor
        os.close(current)
        raise


def open_parent(
    root: Path, parts: list[str], shown: str, *, create: bool, owner: tuple[int, int] | None
) -> int:
    """A descriptor of the directory that holds ``parts[-1]``; create it when asked."""
    fd = open_dir(root, parts[:-1], shown, missing_ok=create)
    if fd is not None:
        return fd
    # The parent (or one of its parents) is missing: make it, component by component.
    return make_dirs(root, parts[:-1], shown, owner)


def temp_name(name: str) -> str:
    """A fresh hidden name next to ``name`` for a file being written."""
    return f".{name[:200]}.{secrets.token_hex(6)}.koboi-tmp"


def write_temp(
    dir_fd: int, name: str, data: bytes, *, mode: int, owner: tuple[int, int] | None
) -> str:
    """Write ``data`` to a new temporary file in ``dir_fd``; return its name.

    ``O_CREAT | O_EXCL | O_NOFOLLOW`` relative to the directory descriptor:
    the file is new (nothing planted there is reused) and lies in that very
    directory.
    """
    tmp = temp_name(name)
    fd = os.open(tmp, _NEW_FILE, NEW_FILE_MODE, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fchmod(fd, mode)  # the umask does not decide the mode of a replaced file
        if owner is not None:
            os.fchown(fd, *owner)
        os.fsync(fd)
    except BaseException:  # a half-written temp file never stays behind
        os.close(fd)
        discard(dir_fd, tmp)
        raise
    os.close(fd)
    return tmp


def discard(dir_fd: int, name: str) -> None:
    """Remove ``name`` from ``dir_fd`` if it is there (cleanup; errors ignored)."""
    with suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


def replace_file(
    dir_fd: int, name: str, data: bytes, *, mode: int, owner: tuple[int, int] | None
) -> None:
    """Atomically make ``name`` in ``dir_fd`` hold ``data``: temp file, then ``renameat``."""
    tmp = write_temp(dir_fd, name, data, mode=mode, owner=owner)
    try:
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:  # the rename did not happen: the temp file goes
        discard(dir_fd, tmp)
        raise


def create_file(dir_fd: int, name: str, tmp: str) -> None:
    """Give the finished temp file ``tmp`` the name ``name``, only if that name is free.

    ``linkat`` fails when ``name`` exists, so a file that appeared meanwhile
    is never clobbered; where hard links are not supported, ``renameat``.
    """
    try:
        os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if lstat_child(dir_fd, name) is not None:
            raise FileExistsError(errno.EEXIST, "File exists", name) from None
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return
    discard(dir_fd, tmp)


def read_regular(
    dir_fd: int, name: str, shown: str, limit: int, identity: Identity
) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``name`` in ``dir_fd``, to be changed: refusing
    anything over ``limit``, and a hard link ``identity`` could not change itself."""
    with reported(shown):
        fd = open_child_file(dir_fd, name)
    with closing_fd(fd), reported(shown):
        info = os.fstat(fd)
        require_regular(info, shown)
        refuse_foreign_link(info, identity, shown, write=True)
        if info.st_size > limit:
            raise ToolError(
                f"{shown!r} is {info.st_size:,} bytes; the limit for changing a file is "
                f"{limit:,} bytes (tools_fs.max_write_bytes)"
            )
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                raise ToolError(f"{shown!r} grew past {limit:,} bytes while it was read")
            chunks.append(chunk)
        return b"".join(chunks), info


def require_regular(info: os.stat_result, shown: str) -> None:
    """Refuse directories, devices, FIFOs and sockets with a message that says which."""
    if stat.S_ISREG(info.st_mode):
        return
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{shown!r} is a directory, not a file (list_dir lists directories)")
    raise ToolError(f"{shown!r} is not a regular file")
