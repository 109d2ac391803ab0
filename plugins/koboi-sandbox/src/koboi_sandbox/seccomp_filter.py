"""The seccomp filter of the sandbox: no network, no io_uring, no reaching into other processes.

The filter is written with pyseccomp (libseccomp) in the parent, exported there as a raw
BPF program, and installed in the forked child with a single ``prctl``. Exporting first
matters: libseccomp's own ``seccomp_load()`` compiles the filter again at load time,
allocating in C after ``fork()``, while installing a ready program needs no allocation,
no import, and no lock that another thread of the parent may have held at fork time.

Policy (default: allow; only the native ABI):

* ``socket`` and ``socketpair`` with a domain other than ``AF_UNIX`` fail with EACCES, so
  no IP, netlink, packet or vsock socket can be created;
* ``connect``, ``sendto``, ``sendmsg`` and ``sendmmsg`` fail with EACCES for *every*
  socket, Unix ones included: a sandboxed program cannot reach a local daemon either.
  This also breaks ``send()`` on a socketpair, which asyncio uses to wake its loop from
  another thread (``to_thread``, ``run_in_executor``, subprocess watchers): such programs
  hang. ``NetworkFilter(allow_connected_send=True)`` allows ``sendto`` without a
  destination address, which fixes that and opens nothing: with ``socket`` and
  ``connect`` denied, the only connected sockets are Unix ones the program made itself
  (or inherited, which closing descriptors at spawn prevents), and ``write()`` works on
  any connected socket anyway;
* ``io_uring_*`` fail with EPERM, because io_uring performs socket operations without
  going through the system calls above;
* ``ptrace``, ``process_vm_readv``/``process_vm_writev`` and ``pidfd_getfd`` fail with
  EPERM, so a sandboxed program cannot read or drive another process or borrow its
  descriptors (a connected socket of the agent, say) when it runs as the same user;
* any system call of another ABI (i386 through ``int 0x80``, x32 on x86_64) kills the
  process, so the rules above cannot be bypassed with the other ABI's numbers.
"""

from __future__ import annotations

import ctypes
import errno
import importlib
import os
import socket
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

__all__ = ["DENIED_SYSCALLS", "RULES", "NetworkFilter", "Rule", "available", "rules"]


@dataclass(frozen=True)
class Rule:
    """One rule of the filter, in words: for ``koboi sandbox check`` and the docs."""

    syscall: str
    #: When the rule applies; empty when it applies to every call.
    condition: str
    errno: int

    @property
    def result(self) -> str:
        """What the sandboxed program sees, e.g. ``EACCES``."""
        return errno.errorcode[self.errno]


_NOT_UNIX = "domain is not AF_UNIX"
_TO_ADDRESS = "a destination address is given"


def rules(*, allow_connected_send: bool = False) -> tuple[Rule, ...]:
    """The rules of :class:`NetworkFilter`, in the order they are added.

    ``allow_connected_send`` lets ``sendto`` through when it names no destination
    (``send()`` on a connected socket); see the module docstring for why that is safe.
    """
    return (
        Rule("socket", _NOT_UNIX, errno.EACCES),
        Rule("socketpair", _NOT_UNIX, errno.EACCES),
        Rule("connect", "", errno.EACCES),
        Rule("sendto", _TO_ADDRESS if allow_connected_send else "", errno.EACCES),
        Rule("sendmsg", "", errno.EACCES),
        Rule("sendmmsg", "", errno.EACCES),
        Rule("io_uring_setup", "", errno.EPERM),
        Rule("io_uring_enter", "", errno.EPERM),
        Rule("io_uring_register", "", errno.EPERM),
        Rule("ptrace", "", errno.EPERM),
        Rule("process_vm_readv", "", errno.EPERM),
        Rule("process_vm_writev", "", errno.EPERM),
        Rule("pidfd_getfd", "", errno.EPERM),
    )


#: The default rules: every send denied, Unix sockets included.
RULES: Final[tuple[Rule, ...]] = rules()

#: Names of the system calls the filter denies (some only for non-Unix domains).
DENIED_SYSCALLS: Final[tuple[str, ...]] = tuple(rule.syscall for rule in RULES)

_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_GET_SECCOMP: Final = 21
_PR_SET_SECCOMP: Final = 22
_SECCOMP_MODE_FILTER: Final = 2
_SECCOMP_GET_ACTION_AVAIL: Final = 2
_SECCOMP_RET_KILL_PROCESS: Final = 0x80000000
_SECCOMP_RET_ERRNO: Final = 0x00050000

_INSTALL_HINT: Final = (
    "install libseccomp2 (Debian/Ubuntu: apt install libseccomp2; Fedora: dnf install "
    "libseccomp; Alpine: apk add libseccomp)"
)


class _SockFilter(ctypes.Structure):
    """``struct sock_filter``: one classic BPF instruction."""

    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    """``struct sock_fprog``: what ``PR_SET_SECCOMP`` takes."""

    _fields_ = [
        ("len", ctypes.c_ushort),
        ("filter", ctypes.POINTER(_SockFilter)),
    ]


def _bind_prctl() -> Any:
    """libc's variadic ``prctl`` with explicit types, so pointers are not truncated."""
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True)["prctl"]
    prctl.argtypes = (ctypes.c_int,) + (ctypes.c_ulong,) * 4
    prctl.restype = ctypes.c_int
    return prctl


_prctl = _bind_prctl()
# Bound here so that NetworkFilter.load() looks up nothing beyond module globals.
_get_errno = ctypes.get_errno
_strerror = os.strerror


@cache
def _pyseccomp() -> tuple[Any, str]:
    """The pyseccomp module, or None and why it cannot be used.

    Imported lazily: pyseccomp raises at import time when libseccomp is missing, and
    looking the library up runs ``ldconfig``, which ``koboi --help`` must not pay for.
    """
    try:
        module = importlib.import_module("pyseccomp")
    except ImportError:
        return None, "the pyseccomp package is not installed (pip install pyseccomp)"
    except (RuntimeError, OSError) as exc:
        return None, f"libseccomp cannot be loaded ({exc}): {_INSTALL_HINT}"
    return module, ""


def _kernel_status(pyseccomp: Any) -> str:
    """Empty when the kernel can install our filter, else why not."""
    if _prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
        return "the kernel was built without seccomp (CONFIG_SECCOMP)"
    # A NULL program is rejected with EFAULT only by a kernel that has filter mode;
    # one without CONFIG_SECCOMP_FILTER says EINVAL. Nothing is installed either way.
    if _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, 0, 0, 0) == 0 or _get_errno() != errno.EFAULT:
        return "the kernel was built without seccomp filters (CONFIG_SECCOMP_FILTER)"
    # KILL_PROCESS (Linux 4.14) is the bad-architecture action; without it a filter
    # could only kill the offending thread.
    number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, "seccomp")
    syscall = ctypes.CDLL(None, use_errno=True)["syscall"]
    syscall.argtypes = (ctypes.c_long,) * 4
    syscall.restype = ctypes.c_long
    for action in (_SECCOMP_RET_KILL_PROCESS, _SECCOMP_RET_ERRNO):
        value = ctypes.c_uint32(action)
        if syscall(number, _SECCOMP_GET_ACTION_AVAIL, 0, ctypes.addressof(value)) != 0:
            return (
                f"the kernel lacks seccomp action {action:#x} "
                f"({_strerror(_get_errno())}); Linux 4.14 or newer is needed"
            )
    return ""


@cache
def available() -> tuple[bool, str]:
    """Whether :class:`NetworkFilter` can be built and loaded here, and if not, why.

    Checks that pyseccomp imports, libseccomp loads, and the kernel has seccomp filter
    mode with the actions the filter uses. The reason is a sentence the user can act on;
    when available it names the libseccomp API level in use.
    """
    if _prctl is None:
        return False, f"seccomp is Linux-only (this is {sys.platform})"
    pyseccomp, reason = _pyseccomp()
    if pyseccomp is None:
        return False, reason
    reason = _kernel_status(pyseccomp)
    if reason:
        return False, reason
    try:
        api = pyseccomp.get_api()
    except NotImplementedError:
        api = 0
    return True, f"seccomp filter mode (libseccomp API level {api})"


class NetworkFilter:
    """The sandbox's seccomp filter, compiled once in the parent, loaded in each child.

    Build it with ``NetworkFilter()`` (raises :class:`OSError` or :class:`RuntimeError`
    when :func:`available` is false), then call :meth:`load` from a ``preexec_fn``. One
    instance can serve any number of children: loading does not consume it.
    """

    def __init__(self, *, allow_connected_send: bool = False) -> None:
        pyseccomp, reason = _pyseccomp()
        if pyseccomp is None:
            raise RuntimeError(reason)
        #: What this filter enforces, for ``koboi sandbox check`` and error messages.
        self.rules = rules(allow_connected_send=allow_connected_send)
        syscall_filter = self._build(pyseccomp, self.rules)
        self._pfc = _export_text(syscall_filter.export_pfc)
        program = _export_bytes(syscall_filter.export_bpf)
        count = len(program) // ctypes.sizeof(_SockFilter)
        if count == 0 or count > 0xFFFF or len(program) % ctypes.sizeof(_SockFilter):
            raise RuntimeError(
                f"libseccomp exported a malformed BPF program ({len(program)} bytes)"
            )
        # Kept on the instance: the kernel reads them in the child, so they must outlive
        # every load(), and their addresses are taken now so load() computes nothing.
        self._instructions = (_SockFilter * count).from_buffer_copy(program)
        self._fprog = _SockFprog(count, self._instructions)
        self._fprog_address: int = ctypes.addressof(self._fprog)
        self.instruction_count = count

    @staticmethod
    def _build(pyseccomp: Any, rules: Sequence[Rule]) -> Any:
        """The libseccomp filter context for ``rules`` on the native architecture."""
        syscall_filter = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        # libseccomp's default bad-arch action is KILL_THREAD; a process left running
        # with one thread killed mid-call is worse than one that is stopped. With only
        # the native arch in the filter, i386 (int 0x80) and, on x86_64, x32 numbers
        # (nr >= 0x40000000) take this action: libseccomp checks both by itself.
        syscall_filter.set_attr(pyseccomp.Attr.ACT_BADARCH, pyseccomp.KILL_PROCESS)
        for rule in rules:
            number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, rule.syscall)
            if number < 0:
                # A negative number is libseccomp's marker for "no such syscall on this
                # arch" (or a multiplexed one, which the native-only filter cannot match).
                raise RuntimeError(
                    f"libseccomp does not know {rule.syscall!r} on this architecture; "
                    "upgrade libseccomp"
                )
            args: Sequence[Any] = ()
            if rule.condition == _NOT_UNIX:
                # NE compares all 64 bits: a domain with garbage in the upper half (which
                # the kernel would ignore) is also "not AF_UNIX" and denied.
                args = (pyseccomp.Arg(0, pyseccomp.NE, socket.AF_UNIX),)
            elif rule.condition == _TO_ADDRESS:
                args = (pyseccomp.Arg(4, pyseccomp.NE, 0),)  # sendto's dest_addr
            elif rule.condition:
                raise AssertionError(f"no seccomp argument test for {rule.condition!r}")
            syscall_filter.add_rule(pyseccomp.ERRNO(rule.errno), number, *args)
        return syscall_filter

    def pseudo_code(self) -> str:
        """libseccomp's readable rendering of the filter, for debugging and docs."""
        return self._pfc

    def load(self) -> None:
        """Install the filter on the calling process, for good. Call it in the child.

        Meant for a ``preexec_fn`` right before ``exec``: it imports nothing and
        allocates only what two calls of a pre-resolved C function need. It sets
        ``PR_SET_NO_NEW_PRIVS`` first, which the kernel requires of a process without
        CAP_SYS_ADMIN and which keeps setuid programs from shedding the filter. Raises
        :class:`OSError`.
        """
        if _prctl is None:
            raise OSError(errno.ENOSYS, "seccomp is not available on this platform")
        if _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = _get_errno()
            raise OSError(err, "prctl(PR_SET_NO_NEW_PRIVS): " + _strerror(err))
        if _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, self._fprog_address, 0, 0) != 0:
            err = _get_errno()
            raise OSError(err, "prctl(PR_SET_SECCOMP): " + _strerror(err))


def _export_bytes(export: Any) -> bytes:
    """Run a libseccomp ``export_*`` (which writes to a file descriptor) into bytes."""
    with tempfile.TemporaryFile() as buffer:
        export(buffer)
        buffer.seek(0)
        return buffer.read()


def _export_text(export: Any) -> str:
    return _export_bytes(export).decode("utf-8", "replace")
