"""Landlock through ctypes: filesystem (and TCP) access control that any process can opt into.

Landlock is the kernel's unprivileged sandbox: a process builds a *ruleset* (which access
rights it wants the kernel to police, and which file hierarchies keep which rights), then
enforces it on itself; the restriction is inherited by every descendant and can never be
lifted. No third-party package is needed: three system calls and two structs.

The work is split so that the forked child does almost nothing. :meth:`Ruleset.create`
runs in the parent, where opening paths, allocating and raising are harmless; the child
only calls :func:`restrict_self` from a ``preexec_fn``, right before ``exec``. After
``fork()`` in a process that had other threads, the child may only safely do what cannot
take a lock another thread held (imports take the import lock; allocation may take the
allocator's), so every ctypes function and constant that :func:`restrict_self` touches
is resolved here, at import time.

The values below are the kernel UAPI (``include/uapi/linux/landlock.h``); they are part
of the kernel's stable ABI and never change meaning.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

__all__ = [
    "ABI_UNSUPPORTED",
    "Ruleset",
    "abi_status",
    "abi_version",
    "handled_fs_access",
    "restrict_self",
    "scopes",
]

#: What :func:`abi_version` returns when this kernel cannot enforce Landlock at all.
ABI_UNSUPPORTED: Final = 0

# Filesystem access rights (ABI 1 unless noted).
ACCESS_FS_EXECUTE: Final = 1 << 0
ACCESS_FS_WRITE_FILE: Final = 1 << 1
ACCESS_FS_READ_FILE: Final = 1 << 2
ACCESS_FS_READ_DIR: Final = 1 << 3
ACCESS_FS_REMOVE_DIR: Final = 1 << 4
ACCESS_FS_REMOVE_FILE: Final = 1 << 5
ACCESS_FS_MAKE_CHAR: Final = 1 << 6
ACCESS_FS_MAKE_DIR: Final = 1 << 7
ACCESS_FS_MAKE_REG: Final = 1 << 8
ACCESS_FS_MAKE_SOCK: Final = 1 << 9
ACCESS_FS_MAKE_FIFO: Final = 1 << 10
ACCESS_FS_MAKE_BLOCK: Final = 1 << 11
ACCESS_FS_MAKE_SYM: Final = 1 << 12
ACCESS_FS_REFER: Final = 1 << 13  # ABI 2: link/rename across directories
ACCESS_FS_TRUNCATE: Final = 1 << 14  # ABI 3
ACCESS_FS_IOCTL_DEV: Final = 1 << 15  # ABI 5: ioctl on character/block devices

# Network access rights (ABI 4).
ACCESS_NET_BIND_TCP: Final = 1 << 0
ACCESS_NET_CONNECT_TCP: Final = 1 << 1

# Scopes (ABI 6): what a sandboxed process may not reach outside its own domain.
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0
SCOPE_SIGNAL: Final = 1 << 1

_ACCESS_FS_ABI1: Final = (1 << 13) - 1  # EXECUTE … MAKE_SYM
#: Rights that make sense on a non-directory; the kernel rejects a rule that grants a
#: directory-only right (READ_DIR, REMOVE_*, MAKE_*, REFER) on a file with EINVAL.
_ACCESS_FILE: Final = (
    ACCESS_FS_EXECUTE
    | ACCESS_FS_WRITE_FILE
    | ACCESS_FS_READ_FILE
    | ACCESS_FS_TRUNCATE
    | ACCESS_FS_IOCTL_DEV
)
#: What a ``read_only`` hierarchy keeps: read files, list directories, run programs.
_ACCESS_READ_ONLY: Final = ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR | ACCESS_FS_EXECUTE

_CREATE_RULESET_VERSION: Final = 1 << 0
_RULE_PATH_BENEATH: Final = 1
_PR_SET_NO_NEW_PRIVS: Final = 38

# The Landlock syscalls were added after the syscall tables were unified, so they have
# the same numbers on every architecture but alpha. Only the ones the sandbox is tested
# on are listed; elsewhere Landlock is reported as unavailable rather than guessed at.
_SYSCALL_NUMBERS: Final[dict[str, tuple[int, int, int]]] = {
    "x86_64": (444, 445, 446),
    "amd64": (444, 445, 446),
    "aarch64": (444, 445, 446),
    "arm64": (444, 445, 446),
}


class _RulesetAttr(ctypes.Structure):
    """``struct landlock_ruleset_attr``; the size passed to the kernel says how much of
    it is meant (8 bytes for filesystem only, 16 with network rights, 24 with scopes)."""

    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    """``struct landlock_path_beneath_attr``, packed to 12 bytes as in the UAPI."""

    _pack_ = 1
    _fields_ = [
        ("allowed_access", ctypes.c_uint64),
        ("parent_fd", ctypes.c_int32),
    ]


def _bind_libc() -> tuple[Any, Any]:
    """``syscall`` and ``prctl`` from libc with explicit argument types.

    Both are variadic in C; without ``argtypes`` ctypes would pass Python ints as 32-bit
    ``int`` and truncate pointers. Each is fetched with ``libc[name]`` (a fresh function
    object) so its types cannot clash with another module's use of the same symbol.
    """
    if sys.platform != "linux":
        return None, None
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc["syscall"]
    syscall.argtypes = (ctypes.c_long,) * 5
    syscall.restype = ctypes.c_long
    prctl = libc["prctl"]
    prctl.argtypes = (ctypes.c_int,) + (ctypes.c_ulong,) * 4
    prctl.restype = ctypes.c_int
    return syscall, prctl


_syscall, _prctl = _bind_libc()
_numbers = _SYSCALL_NUMBERS.get(platform.machine().lower())
_NR_CREATE_RULESET, _NR_ADD_RULE, _NR_RESTRICT_SELF = _numbers or (-1, -1, -1)
# Bound here so that restrict_self() looks up nothing beyond module globals.
_get_errno = ctypes.get_errno
_strerror = os.strerror


def abi_status() -> tuple[int, str]:
    """The kernel's Landlock ABI version and a sentence a user can act on.

    The version, not the kernel release, says which rights exist: distributions
    backport Landlock, and a kernel may have it compiled in but switched off.
    """
    if _syscall is None:
        return ABI_UNSUPPORTED, f"Landlock is Linux-only (this is {sys.platform})"
    if _numbers is None:
        return (
            ABI_UNSUPPORTED,
            f"Landlock is not wired up for the {platform.machine()} architecture",
        )
    abi = _syscall(_NR_CREATE_RULESET, 0, 0, _CREATE_RULESET_VERSION, 0)
    if abi >= 0:
        return int(abi), f"Landlock ABI {abi}"
    err = _get_errno()
    if err == errno.ENOSYS:
        return ABI_UNSUPPORTED, (
            "the kernel has no Landlock (needs Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK)"
        )
    if err == errno.EOPNOTSUPP:
        return ABI_UNSUPPORTED, (
            "Landlock is built into the kernel but disabled: add 'landlock' to the lsm= "
            "kernel boot parameter"
        )
    if err == errno.EPERM:
        return ABI_UNSUPPORTED, (
            "the Landlock system calls are blocked, most likely by a container's seccomp "
            "profile (allow landlock_create_ruleset, landlock_add_rule, landlock_restrict_self)"
        )
    return ABI_UNSUPPORTED, f"landlock_create_ruleset failed: {_strerror(err)}"


def abi_version() -> int:
    """The kernel's Landlock ABI version, or :data:`ABI_UNSUPPORTED` (0)."""
    return abi_status()[0]


def handled_fs_access(abi: int) -> int:
    """Every filesystem right Landlock ABI ``abi`` knows: what a ruleset should police.

    Handling a right means denying it everywhere a rule does not grant it; a right left
    unhandled is not restricted at all, so the sandbox handles all of them.
    """
    if abi < 1:
        return 0
    access = _ACCESS_FS_ABI1
    if abi >= 2:
        access |= ACCESS_FS_REFER
    if abi >= 3:
        access |= ACCESS_FS_TRUNCATE
    if abi >= 5:
        access |= ACCESS_FS_IOCTL_DEV
    return access


def scopes(abi: int) -> int:
    """Every scope Landlock ABI ``abi`` knows (ABI 6+: signals, abstract Unix sockets).

    A scoped process cannot send a signal to, or connect to an abstract Unix socket of,
    a process outside its own Landlock domain: one session's processes cannot kill
    another's (or koboi) even when they run as the same user.
    """
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


def _fail(what: str) -> OSError:
    err = _get_errno()
    return OSError(err, f"{what}: {_strerror(err)}")


class Ruleset:
    """A Landlock ruleset held by file descriptor, built in the parent process.

    Hand :attr:`fd` to :func:`restrict_self` in the child (a ``preexec_fn`` runs before
    the child closes inherited descriptors, so ``pass_fds`` is not needed; the kernel
    creates the descriptor close-on-exec, so it never reaches the sandboxed program).
    Close it in the parent once the child has started; it is a context manager for that.
    """

    def __init__(
        self,
        fd: int,
        *,
        abi: int,
        handled_access_fs: int,
        handled_access_net: int,
        scoped: int = 0,
        skipped: Sequence[Path] = (),
    ) -> None:
        self.fd = fd
        self.abi = abi
        self.handled_access_fs = handled_access_fs
        self.handled_access_net = handled_access_net
        self.scoped = scoped
        #: Requested paths that do not exist, so no rule was added for them.
        self.skipped: tuple[Path, ...] = tuple(skipped)

    @classmethod
    def create(
        cls,
        *,
        read_only: Sequence[Path],
        read_write: Sequence[Path],
        abi: int | None = None,
        deny_tcp: bool = True,
        scope: bool = True,
    ) -> Self:
        """Build a ruleset that allows only ``read_only`` and ``read_write`` hierarchies.

        ``read_only`` paths keep reading files, listing directories and executing;
        ``read_write`` paths keep every right the ABI has. A rule on a regular file (or a
        device such as ``/dev/null``) keeps only the file rights among those. Everything
        else on the filesystem is denied, including ``/proc`` unless listed. With
        ``deny_tcp`` on ABI 4+, TCP bind and connect are handled with no rule allowing
        any port, so both always fail with EACCES. With ``scope`` on ABI 6+, signals and
        abstract Unix sockets cannot reach a process outside the domain (:func:`scopes`).

        ``abi`` pins the ABI the ruleset is written for (default: the kernel's). Raises
        :class:`OSError` when Landlock is unavailable or the kernel rejects a rule.
        """
        if abi is None:
            abi, reason = abi_status()
            if abi < 1:
                raise OSError(errno.EOPNOTSUPP, reason)
        elif abi < 1:
            raise ValueError(f"Landlock ABI must be 1 or more, not {abi}")
        assert _syscall is not None  # abi_status() reported Linux with the syscalls
        handled_fs = handled_fs_access(abi)
        handled_net = ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP if abi >= 4 and deny_tcp else 0
        scoped = scopes(abi) if scope else 0
        attr = _RulesetAttr(handled_fs, handled_net, scoped)
        # Pass only the part of the struct that is used, so older kernels (ABI 1-3 know
        # only handled_access_fs, 4-5 no scopes) accept it however they treat a longer one.
        field = ctypes.sizeof(ctypes.c_uint64)
        size = 3 * field if scoped else 2 * field if handled_net else field
        fd = _syscall(_NR_CREATE_RULESET, ctypes.addressof(attr), size, 0, 0)
        if fd < 0:
            raise _fail("landlock_create_ruleset")
        try:
            skipped: list[Path] = []
            for paths, access in (
                (read_only, _ACCESS_READ_ONLY & handled_fs),
                (read_write, handled_fs),
            ):
                for path in paths:
                    if not _add_path_rule(fd, Path(path), access):
                        skipped.append(Path(path))
        except BaseException:  # whatever stops the rules, the ruleset descriptor is closed
            os.close(fd)
            raise
        return cls(
            fd,
            abi=abi,
            handled_access_fs=handled_fs,
            handled_access_net=handled_net,
            scoped=scoped,
            skipped=skipped,
        )

    def close(self) -> None:
        """Close the descriptor (idempotent); children already restricted stay so."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Ruleset(fd={self.fd}, abi={self.abi}, handled_access_fs={self.handled_access_fs:#x}, "
            f"handled_access_net={self.handled_access_net:#x}, scoped={self.scoped:#x}, "
            f"skipped={list(self.skipped)!r})"
        )


def _add_path_rule(ruleset_fd: int, path: Path, access: int) -> bool:
    """Allow ``access`` beneath ``path``; False when the path does not exist.

    The path is opened ``O_PATH`` (no read permission needed, nothing is read) and
    symlinks are followed, so ``/lib -> usr/lib`` allows the real directory.
    """
    assert _syscall is not None
    try:
        path_fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        if not stat.S_ISDIR(os.fstat(path_fd).st_mode):
            access &= _ACCESS_FILE
        rule = _PathBeneathAttr(access, path_fd)
        if _syscall(_NR_ADD_RULE, ruleset_fd, _RULE_PATH_BENEATH, ctypes.addressof(rule), 0) != 0:
            err = _get_errno()
            raise OSError(err, f"landlock_add_rule: {_strerror(err)}", str(path))
    finally:
        os.close(path_fd)
    return True


def restrict_self(fd: int) -> None:
    """Enforce ruleset ``fd`` on the calling process, for good. Call it in the child.

    Meant for a ``preexec_fn`` right before ``exec``: it imports nothing and allocates
    only what calling two pre-resolved C functions needs, so it is safe after ``fork()``
    in a threaded parent. ``PR_SET_NO_NEW_PRIVS`` comes first because the kernel refuses
    an unprivileged ``landlock_restrict_self`` without it, and because a sandboxed
    program must not regain privileges through a setuid binary. Raises :class:`OSError`.
    """
    if _syscall is None or _prctl is None or _NR_RESTRICT_SELF < 0:
        raise OSError(errno.ENOSYS, "Landlock is not available on this platform")
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")
    if _syscall(_NR_RESTRICT_SELF, fd, 0, 0, 0) != 0:
        raise _fail("landlock_restrict_self")
