"""What this machine can enforce: the facts behind ``koboi sandbox check`` and the runner's choices.

Every answer comes from asking the kernel, not from version numbers: distributions
backport features, switch them off at boot (``lsm=``, ``user.max_user_namespaces=0``),
or forbid them by policy (AppArmor's ``restrict_unprivileged_userns``), and containers
filter system calls. Checks that would change the calling process (entering a
namespace) run in a short-lived forked child.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import warnings
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from koboi_sandbox import landlock, seccomp_filter

__all__ = ["Capabilities", "probe"]

#: The uid/gid conventionally left unmapped and owning nothing, used when there is no
#: ``nobody`` entry in the user database.
NOBODY_ID: Final = 65534

_CLONE_NEWUSER: Final = 0x10000000
_CLONE_NEWPID: Final = 0x20000000
_PR_GET_NO_NEW_PRIVS: Final = 39


@dataclass(frozen=True)
class Capabilities:
    """The isolation features available to the sandbox on this machine."""

    platform: str
    seccomp: bool
    seccomp_reason: str
    landlock_abi: int
    landlock_reason: str
    #: This process can create a user namespace.
    user_namespaces: bool
    #: This process can create a PID namespace: directly as root, else inside a new
    #: user namespace.
    pid_namespaces: bool
    #: The effective uid is 0, so children can be switched to another user.
    root: bool
    #: ``nobody``'s ids (65534 when the user database has no ``nobody``); None off
    #: POSIX. Sandboxed commands no longer run as it: as root, each session gets an id
    #: of its own (:mod:`koboi_sandbox.identity`).
    unprivileged_uid: int | None
    unprivileged_gid: int | None
    #: The kernel supports ``PR_SET_NO_NEW_PRIVS`` (Linux 3.5+).
    no_new_privs: bool

    def rows(self) -> list[tuple[str, bool, str]]:
        """(protection, available, detail), one row per protection, for a table."""
        if self.unprivileged_uid is None:
            user_detail = "no POSIX users on this platform"
        elif self.root:
            user_detail = (
                "each session's commands run as an unprivileged uid/gid of their own "
                "(sandbox.session_ids), without capabilities"
            )
        else:
            user_detail = (
                f"koboi is not root, so commands keep its uid {_euid()}; a uid per session "
                "needs root (sessions are then kept apart by Landlock alone)"
            )
        return [
            ("seccomp filter", self.seccomp, self.seccomp_reason),
            ("Landlock", self.landlock_abi > 0, self.landlock_reason),
            (
                "user namespaces",
                self.user_namespaces,
                "unshare(CLONE_NEWUSER) works"
                if self.user_namespaces
                else "unshare(CLONE_NEWUSER) is refused (disabled by sysctl or policy)",
            ),
            (
                "PID namespaces",
                self.pid_namespaces,
                ("as root" if self.root else "inside a user namespace")
                if self.pid_namespaces
                else "unshare(CLONE_NEWPID) is refused",
            ),
            ("unprivileged user", self.root and self.unprivileged_uid is not None, user_detail),
            (
                "no_new_privs",
                self.no_new_privs,
                "setuid programs cannot gain privileges in the sandbox"
                if self.no_new_privs
                else "the kernel has no PR_SET_NO_NEW_PRIVS (Linux 3.5+)",
            ),
        ]


def _euid() -> int | None:
    geteuid = getattr(os, "geteuid", None)
    return geteuid() if geteuid is not None else None


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _can_unshare(flags: int) -> bool:
    """Whether ``unshare(flags)`` succeeds, tried in a forked child that then exits.

    The calling process may have threads (``unshare(CLONE_NEWUSER)`` refuses those)
    and must not end up in a new namespace, so the attempt runs in a child. The child
    only calls a function resolved before the fork and leaves with ``os._exit``.
    """
    unshare = _libc()["unshare"]
    unshare.argtypes = (ctypes.c_int,)
    unshare.restype = ctypes.c_int
    with warnings.catch_warnings():
        # Python 3.12+ warns that fork() in a threaded process may deadlock the child;
        # this child touches no lock (no import, no I/O) before exiting.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, reported through the exit code
        status = 1
        try:
            if unshare(flags) == 0:
                status = 0
        finally:
            # Never return into the caller's code in the child, whatever happened.
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _no_new_privs_supported() -> bool:
    """Whether the kernel knows ``PR_GET_NO_NEW_PRIVS`` (and so the SET variant)."""
    prctl = _libc()["prctl"]
    prctl.argtypes = (ctypes.c_int,) + (ctypes.c_ulong,) * 4
    prctl.restype = ctypes.c_int
    return prctl(_PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) >= 0 or ctypes.get_errno() != errno.EINVAL


def _unprivileged_ids() -> tuple[int | None, int | None]:
    try:
        import pwd
    except ImportError:  # not POSIX
        return None, None
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return NOBODY_ID, NOBODY_ID
    return entry.pw_uid, entry.pw_gid


@cache
def probe() -> Capabilities:
    """Ask this machine what it can enforce. Cached: the answers do not change while
    koboi runs (a fork per namespace check is cheap but not free)."""
    root = _euid() == 0
    uid, gid = _unprivileged_ids()
    landlock_abi, landlock_reason = landlock.abi_status()
    if sys.platform != "linux":
        seccomp, seccomp_reason = False, f"seccomp is Linux-only (this is {sys.platform})"
        return Capabilities(
            platform=sys.platform,
            seccomp=seccomp,
            seccomp_reason=seccomp_reason,
            landlock_abi=landlock_abi,
            landlock_reason=landlock_reason,
            user_namespaces=False,
            pid_namespaces=False,
            root=root,
            unprivileged_uid=uid,
            unprivileged_gid=gid,
            no_new_privs=False,
        )
    seccomp, seccomp_reason = seccomp_filter.available()
    user_namespaces = _can_unshare(_CLONE_NEWUSER)
    if root:
        pid_namespaces = _can_unshare(_CLONE_NEWPID)
    else:
        # The new user namespace grants CAP_SYS_ADMIN over itself, which is what a PID
        # namespace needs; a policy that strips it (AppArmor) makes this fail, as it should.
        pid_namespaces = user_namespaces and _can_unshare(_CLONE_NEWUSER | _CLONE_NEWPID)
    return Capabilities(
        platform=sys.platform,
        seccomp=seccomp,
        seccomp_reason=seccomp_reason,
        landlock_abi=landlock_abi,
        landlock_reason=landlock_reason,
        user_namespaces=user_namespaces,
        pid_namespaces=pid_namespaces,
        root=root,
        unprivileged_uid=uid,
        unprivileged_gid=gid,
        no_new_privs=_no_new_privs_supported(),
    )
