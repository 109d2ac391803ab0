"""Starting one confined process: what the child does to itself between fork and exec.

Everything is prepared in the parent (the Landlock ruleset, the seccomp
filter, the limits); the child, in ``preexec_fn``, only applies it, in an
order that matters:

1. ``setsid`` — its own session and process group (a timeout kills the group).
2. a PID namespace, when available: the child forks once more; the grandchild
   is PID 1 of a new namespace and becomes the command, while the child stays
   behind as a *waiter* that only waits and passes the exit status on. When
   the command (PID 1) exits or is killed, the kernel kills every process left
   in the namespace — background children, and grandchildren that escaped the
   process group with ``setsid``, included. Killing the waiter kills PID 1
   through its parent-death signal.
3. resource limits (CPU, address space, file size, processes, open files), and
   the umask (``077``: what a command creates is private to its session's user).
4. Landlock (``no_new_privs`` first): the filesystem the command may touch.
5. the unprivileged user, when koboi runs as root: no groups, then gid, then
   uid; the capabilities go with uid 0.
6. the parent-death signal (after the uid change, which clears it).
7. the seccomp filter, last, so nothing above is filtered.

The function runs after ``fork`` in a process that may have had other
threads: it imports nothing and calls only what was resolved beforehand.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
from collections.abc import Callable
from dataclasses import dataclass

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_prctl = _libc.prctl
_unshare = _libc.unshare

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000

#: Exit status of the waiter when the child could not be confined: never run
#: a command less confined than configured.
CONFINEMENT_FAILED = 125


@dataclass(frozen=True)
class Confinement:
    """What to apply to one child process (all of it prepared in the parent)."""

    rlimits: tuple[tuple[int, int], ...] = ()
    pid_namespace: bool = False
    #: Also a new user namespace (when koboi is not root, it needs one for the PID one).
    user_namespace: bool = False
    landlock_fd: int | None = None
    restrict_self: Callable[[int], None] | None = None
    uid: int | None = None
    gid: int | None = None
    seccomp_load: Callable[[], None] | None = None
    umask: int | None = None


def make_preexec(confinement: Confinement) -> Callable[[], None]:
    """The ``preexec_fn`` applying ``confinement`` (see the module docstring for the order)."""
    rlimits = confinement.rlimits
    setrlimit = resource.setrlimit
    flags = CLONE_NEWPID | (CLONE_NEWUSER if confinement.user_namespace else 0)
    landlock_fd = confinement.landlock_fd
    restrict_self = confinement.restrict_self
    uid, gid = confinement.uid, confinement.gid
    seccomp_load = confinement.seccomp_load
    pid_namespace = confinement.pid_namespace
    umask = confinement.umask
    write = os.write

    def fail(what: bytes) -> None:
        # stderr is already the pipe to koboi: say what failed, and never exec.
        try:
            write(2, b"koboi sandbox: could not " + what + b"\n")
        finally:
            os._exit(CONFINEMENT_FAILED)

    def preexec() -> None:
        try:
            os.setsid()
        except OSError:
            fail(b"start a new session")
        if pid_namespace:
            if _unshare(flags) != 0:
                fail(b"create a PID namespace")
            pid = os.fork()
            if pid > 0:
                _wait_for(pid, uid, gid)  # never returns
        # Limits after the fork: they bind the command, not the waiter.
        for kind, limit in rlimits:
            try:
                setrlimit(kind, (limit, limit))
            except (OSError, ValueError):
                fail(b"set a resource limit")
        if umask is not None:
            os.umask(umask)
        if restrict_self is not None and landlock_fd is not None:
            try:
                restrict_self(landlock_fd)
            except OSError:
                fail(b"apply Landlock")
        if uid is not None and gid is not None:
            try:
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
            except OSError:
                fail(b"switch to the unprivileged user")
        if _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            fail(b"set the parent-death signal")
        if seccomp_load is not None:
            try:
                seccomp_load()
            except Exception:  # in the child before exec: any failure must stop the exec
                fail(b"load the seccomp filter")

    return preexec


def _wait_for(pid: int, uid: int | None, gid: int | None) -> None:
    """The waiter: hold nothing, wait for PID 1 of the namespace, exit with its status."""
    # The pipe subprocess uses to report exec errors is among these: only the
    # command may hold it, or koboi would wait on the waiter instead.
    os.closerange(3, 0x7FFFFFFF)  # close_range(2): every descriptor, however many
    try:
        if uid is not None and gid is not None:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                os._exit(CONFINEMENT_FAILED)
            except InterruptedError:
                continue
        if os.WIFSIGNALED(status):
            os._exit(128 + os.WTERMSIG(status))
        os._exit(os.WEXITSTATUS(status))
    finally:
        os._exit(CONFINEMENT_FAILED)


def rlimit_pairs(
    *, cpu_seconds: int, address_space_mb: int, file_size_mb: int, processes: int, open_files: int
) -> tuple[tuple[int, int], ...]:
    """The (resource, limit) pairs of the configured limits."""
    mib = 1024 * 1024
    return (
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_AS, address_space_mb * mib),
        (resource.RLIMIT_FSIZE, file_size_mb * mib),
        (resource.RLIMIT_NPROC, processes),
        (resource.RLIMIT_NOFILE, open_files),
    )


def make_undumpable() -> bool:
    """Make this process non-dumpable: other processes of its user cannot read its
    memory or environment through /proc or attach with ptrace. True on success."""
    try:
        return int(_prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except Exception:  # no prctl here (not Linux, no libc): reported as not done
        return False
