"""Opening a path a model gave, only inside a session's working directory.

String checks (``startswith(root)``) are wrong twice over: ``/w/s1_evil``
starts with ``/w/s1``, and a symlink swapped in between the check and the
``open`` sends the open elsewhere. :func:`open_inside` resolves the path in
the kernel, relative to a directory file descriptor of the root:

- on Linux 5.6+ with one ``openat2`` call and ``RESOLVE_BENEATH |
  RESOLVE_NO_MAGICLINKS``: ``..`` may not climb out, a symlink may not lead
  out, ``/proc/*/root``-style magic links are refused — all checked
  atomically by the kernel, so nothing can be swapped in during the call;
- elsewhere, component by component with ``openat(..., O_NOFOLLOW)``, each
  step holding the directory it came from: no symlink is followed at all.

Either way ``..`` components and NUL bytes are refused before anything is
opened, and an absolute path is accepted only when it names something under
the root (compared component by component).

What resolving cannot see is a **hard link**: a second name, inside the root,
for a file that lives elsewhere (``ln ../B/secret.txt hl.txt``). The name is
beneath the root; the file is not. Tools that run in koboi's process (as koboi's
user, often root) would read it for the session. :func:`refuse_foreign_link`
is the rule the file tools apply to every regular file they open: a file with
more than one link is opened only when it is **the session's own** — owned by
the session's own uid (:func:`session_identity`). Its mode bits do not say
enough: a world-readable file in another session's ``0700`` directory is one
the session could never have reached by any path. Where the session has no
identity of its own (koboi is not root, so the session's processes run as
koboi's own user, who owns every session's files and koboi's), nothing tells a
link the session may follow from one it may not, so every file with more than
one link is refused. A file with a single link has only the name beneath the
root.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from koboi.errors import ToolError

_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)  # Linux; plain read-only elsewhere
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = (
    {"x86_64": 437, "aarch64": 437}.get(os.uname().machine) if hasattr(os, "uname") else None
)


class PathRefused(ToolError):
    """A path that is not inside the session's working directory (the message says why)."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_openat2() -> object | None:
    if not sys.platform.startswith("linux") or _SYS_OPENAT2 is None:
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    return syscall


_syscall = _load_openat2()
_openat2_works: bool | None = None


def relative_parts(root: Path, path: str) -> list[str]:
    """The components of ``path`` below ``root``, or :class:`PathRefused` saying why not."""
    if "\0" in path:
        raise PathRefused("the path contains a NUL byte")
    if not path or not path.strip():
        raise PathRefused("the path is empty")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        root_parts = PurePosixPath(os.path.realpath(root)).parts
        given = pure.parts
        if given[: len(root_parts)] != root_parts:
            raise PathRefused(f"{path!r} is outside the working directory {str(root)!r}")
        parts = list(given[len(root_parts) :])
    else:
        parts = list(pure.parts)
    if ".." in parts:
        raise PathRefused(f"{path!r} contains '..'; give a path inside the working directory")
    return [p for p in parts if p not in ("", ".")]


def open_inside(root: Path, path: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A file descriptor for ``path`` opened with ``flags``, only if it lies inside ``root``.

    Raises :class:`PathRefused` for a path that leads out (or is malformed),
    and the usual ``OSError`` (``FileNotFoundError``...) for one that is inside
    but cannot be opened. The caller owns the descriptor.
    """
    global _openat2_works
    parts = relative_parts(root, path)
    relative = "/".join(parts) or "."
    root_fd = os.open(root, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _syscall is not None and _openat2_works is not False:
            how = _OpenHow(
                flags | os.O_CLOEXEC,
                mode if flags & os.O_CREAT else 0,
                _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS,
            )
            fd = _syscall(  # type: ignore[operator]
                _SYS_OPENAT2, root_fd, relative.encode(), ctypes.byref(how), ctypes.sizeof(how)
            )
            if fd >= 0:
                _openat2_works = True
                return int(fd)
            code = ctypes.get_errno()
            if code in (errno.ENOSYS, errno.EPERM) and _openat2_works is None:
                _openat2_works = False  # no openat2 here (old kernel, seccomp): walk instead
            elif code == errno.EXDEV:
                raise PathRefused(
                    f"{path!r} leads outside the working directory (through '..' or a symlink)"
                )
            elif code == errno.ELOOP:
                raise PathRefused(f"{path!r} goes through a link koboi does not follow")
            else:
                raise OSError(code, os.strerror(code), path)
        return _walk(root_fd, parts, flags, mode, path)
    finally:
        os.close(root_fd)


def _walk(root_fd: int, parts: list[str], flags: int, mode: int, shown: str) -> int:
    """``openat`` one component at a time, never following a symlink."""
    current = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            try:
                step = os.open(
                    part, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current
                )
            except NotADirectoryError:
                raise PathRefused(
                    f"{shown!r}: {part!r} is a symlink or not a directory; koboi does not follow "
                    "symlinks here"
                ) from None
            os.close(current)
            current = step
        last = parts[-1] if parts else "."
        try:
            return os.open(last, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=current)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PathRefused(
                    f"{shown!r} is a symlink; koboi does not follow symlinks here"
                ) from None
            raise
    finally:
        os.close(current)


@dataclass(frozen=True)
class Identity:
    """Who a session's processes run as, which is who the file tools act for."""

    uid: int
    gid: int
    #: True when the session has an id of its own (koboi is root and the workdir belongs
    #: to another uid); False when its processes run as koboi's own user.
    own: bool


def session_identity(root: Path) -> Identity:
    """The identity of the session whose working directory is ``root``.

    The restricted sandbox gives, as root, each session a uid of its own and makes
    its directory that uid's; the directory's owner is then the session's identity.
    Otherwise (koboi not root, or a directory root still owns) it is koboi's own.
    """
    info = os.stat(root)
    euid = os.geteuid()
    if euid == 0 and info.st_uid != 0:
        return Identity(info.st_uid, info.st_gid, own=True)
    return Identity(euid, os.getegid(), own=False)


def link_allowed(info: os.stat_result, identity: Identity) -> bool:
    """False for a hard-linked regular file that is not the session's own (see the module
    docstring); True for everything else."""
    if not stat.S_ISREG(info.st_mode) or info.st_nlink <= 1:
        return True
    return identity.own and info.st_uid == identity.uid


def refuse_foreign_link(
    info: os.stat_result, identity: Identity, shown: str, *, write: bool = False
) -> None:
    """:class:`PathRefused` unless :func:`link_allowed`; the message says why."""
    if link_allowed(info, identity):
        return
    links = info.st_nlink
    if identity.own:
        raise PathRefused(
            f"{shown!r} is a hard link ({links} names) to a file this session does not own, "
            f"so one it could not {'change' if write else 'open'} as itself; koboi's file "
            "tools do not follow it"
        )
    raise PathRefused(
        f"{shown!r} has {links} hard links, and another may name a file outside the working "
        "directory; koboi's file tools do not open hard-linked files here (copy it to make "
        "a file of its own)"
    )
