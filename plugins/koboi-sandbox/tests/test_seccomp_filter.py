"""The seccomp filter, proven on the real kernel from outside, each denial beside a control.

The filter is loaded in the child's ``preexec_fn``; the child reports ``ok`` or the errno
name of what it attempted. Network denials are also checked from the listener's side:
a denied connection must never arrive.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from koboi_sandbox.seccomp_filter import DENIED_SYSCALLS, RULES, NetworkFilter, available

AVAILABLE, REASON = available()
pytestmark = [
    pytest.mark.seccomp,
    # Skipped without it, failed when CI is set (conftest: the "needs" marker).
    pytest.mark.needs(AVAILABLE, f"seccomp filter unavailable: {REASON}"),
]

X86_64 = platform.machine().lower() in {"x86_64", "amd64"}

#: The child's side: attempt one operation, print ``ok`` or the errno's name.
ATTEMPT = r"""
import ctypes, errno, os, signal, socket, sys

libc = ctypes.CDLL(None, use_errno=True)
syscall = libc["syscall"]
syscall.argtypes = (ctypes.c_long,) * 4
syscall.restype = ctypes.c_long

def check(result):
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result

op, args = sys.argv[1], sys.argv[2:]
try:
    if op == "inet":
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    elif op == "inet6-udp":
        socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close()
    elif op == "netlink":
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close()
    elif op == "unix":
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
        for end in socket.socketpair(socket.AF_UNIX):
            end.close()
    elif op == "socketpair-write":
        left, right = socket.socketpair(socket.AF_UNIX)
        os.write(left.fileno(), b"x")
        assert right.recv(1) == b"x"
    elif op == "socketpair-send":
        left, right = socket.socketpair(socket.AF_UNIX)
        left.send(b"x")  # send() is sendto(..., NULL, 0): how asyncio wakes its loop
        assert right.recv(1) == b"x"
    elif op == "connect":
        socket.socket(fileno=int(args[0])).connect(("127.0.0.1", int(args[1])))
    elif op == "connect-unix":
        socket.socket(socket.AF_UNIX).connect(args[0])
    elif op == "sendto":
        socket.socket(fileno=int(args[0])).sendto(b"x", ("127.0.0.1", int(args[1])))
    elif op == "sendmsg":
        socket.socket(fileno=int(args[0])).sendmsg([b"x"], [], 0, ("127.0.0.1", int(args[1])))
    elif op == "ptrace":
        ptrace = libc["ptrace"]
        ptrace.argtypes = (ctypes.c_long,) * 4
        ptrace.restype = ctypes.c_long
        child = os.fork()
        if child == 0:
            signal.pause()
            os._exit(0)
        try:
            check(ptrace(0x4206, child, 0, 0))  # PTRACE_SEIZE: attach without stopping
        finally:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
    elif op == "process_vm_readv":
        class IoVec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
        source, target = ctypes.create_string_buffer(b"data"), ctypes.create_string_buffer(4)
        local = IoVec(ctypes.addressof(target), 4)
        remote = IoVec(ctypes.addressof(source), 4)
        readv = libc["process_vm_readv"]
        readv.restype = ctypes.c_ssize_t
        check(readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
        assert target.raw == b"data"
    elif op == "pidfd_getfd":
        check(syscall(int(args[0]), os.pidfd_open(os.getpid()), 1, 0))
    elif op == "io_uring_setup":
        params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
        check(syscall(int(args[0]), 1, ctypes.addressof(params), 0))
    elif op == "x32-socket":
        # The x32 ABI numbers calls from 0x40000000 on the same x86_64 audit arch.
        check(syscall(0x40000000 | int(args[0]), socket.AF_INET, socket.SOCK_STREAM, 0))
    elif op == "i386-socket":
        import mmap
        # push rbx; mov eax, 359 (i386 socket); mov ebx, AF_INET; mov ecx, SOCK_STREAM;
        # xor edx, edx; int 0x80; pop rbx; ret
        code = bytes.fromhex("53 b867010000 bb02000000 b901000000 31d2 cd80 5b c3")
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(code)
        address = ctypes.addressof(ctypes.c_char.from_buffer(page))
        check(ctypes.CFUNCTYPE(ctypes.c_int)(address)())
except OSError as exc:
    print(errno.errorcode[exc.errno])
else:
    print("ok")
"""


@pytest.fixture(scope="module")
def network_filter() -> NetworkFilter:
    return NetworkFilter()


@pytest.fixture(scope="module")
def relaxed_filter() -> NetworkFilter:
    return NetworkFilter(allow_connected_send=True)


def spawn(
    argv: Sequence[str],
    preexec: Callable[[], None] | None,
    *,
    pass_fds: Sequence[int] = (),
    user: int | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        preexec_fn=preexec,
        pass_fds=pass_fds,
        user=user,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def attempt(
    op: str, *args: object, loaded: NetworkFilter | None, pass_fds: Sequence[int] = ()
) -> str:
    """Run ATTEMPT in a child, under ``loaded``'s filter (None: the control)."""
    result = spawn(
        [sys.executable, "-I", "-S", "-c", ATTEMPT, op, *map(str, args)],
        None if loaded is None else loaded.load,
        pass_fds=pass_fds,
    )
    assert result.returncode == 0, f"the child failed ({result.returncode}): {result.stderr}"
    return result.stdout.strip()


def syscall_number(name: str) -> int:
    import pyseccomp  # type: ignore[import-untyped]

    return int(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name))


@pytest.fixture
def tcp_listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(5)
        yield listener


def assert_nothing_arrived(listener: socket.socket) -> None:
    listener.setblocking(False)
    with pytest.raises(BlockingIOError):
        listener.accept()


def test_available_says_why() -> None:
    assert AVAILABLE is True
    assert "seccomp" in REASON


def test_the_denied_syscalls_are_the_documented_ones() -> None:
    assert set(DENIED_SYSCALLS) >= {
        "socket",
        "socketpair",
        "connect",
        "sendto",
        "sendmsg",
        "sendmmsg",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
    }
    assert len(set(DENIED_SYSCALLS)) == len(DENIED_SYSCALLS) == len(RULES)
    assert {rule.result for rule in RULES} == {"EACCES", "EPERM"}


def test_other_architectures_kill_the_process(network_filter: NetworkFilter) -> None:
    code = network_filter.pseudo_code()
    assert "invalid architecture action\naction KILL_PROCESS;" in code
    assert code.count("if ($arch ==") == 1, "only the native architecture is allowed through"


def test_inet_sockets_cannot_be_created(network_filter: NetworkFilter) -> None:
    for op in ("inet", "inet6-udp", "netlink"):
        assert attempt(op, loaded=None) == "ok", f"control: {op} works unfiltered"
        assert attempt(op, loaded=network_filter) == "EACCES", op


def test_python_sees_permission_error(network_filter: NetworkFilter) -> None:
    code = "import socket; socket.socket(socket.AF_INET)"
    assert spawn([sys.executable, "-I", "-S", "-c", code], None).returncode == 0
    result = spawn([sys.executable, "-I", "-S", "-c", code], network_filter.load)
    assert result.returncode == 1
    assert "PermissionError: [Errno 13] Permission denied" in result.stderr


def test_unix_sockets_can_be_created_and_written(network_filter: NetworkFilter) -> None:
    assert attempt("unix", loaded=network_filter) == "ok"
    assert attempt("socketpair-write", loaded=network_filter) == "ok"


def test_connect_on_an_inherited_tcp_socket_is_denied(
    network_filter: NetworkFilter, tcp_listener: socket.socket
) -> None:
    port = tcp_listener.getsockname()[1]
    with socket.socket() as inherited:
        fd = inherited.fileno()
        assert attempt("connect", fd, port, loaded=None, pass_fds=[fd]) == "ok"
    tcp_listener.accept()[0].close()  # control: the connection arrived
    with socket.socket() as inherited:
        fd = inherited.fileno()
        assert attempt("connect", fd, port, loaded=network_filter, pass_fds=[fd]) == "EACCES"
    assert_nothing_arrived(tcp_listener)


def test_bash_dev_tcp_cannot_connect(
    network_filter: NetworkFilter, tcp_listener: socket.socket
) -> None:
    argv = ["bash", "-c", f"echo hello > /dev/tcp/127.0.0.1/{tcp_listener.getsockname()[1]}"]
    assert spawn(argv, None).returncode == 0
    connection = tcp_listener.accept()[0]
    connection.settimeout(5)
    assert connection.recv(16) == b"hello\n", "control: bash reaches the listener"
    connection.close()
    denied = spawn(argv, network_filter.load)
    assert denied.returncode != 0
    assert "Permission denied" in denied.stderr
    assert_nothing_arrived(tcp_listener)


@pytest.mark.parametrize("op", ["sendto", "sendmsg"])
def test_udp_datagrams_cannot_be_sent(network_filter: NetworkFilter, op: str) -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as inherited,
    ):
        receiver.bind(("127.0.0.1", 0))
        port, fd = receiver.getsockname()[1], inherited.fileno()
        assert attempt(op, fd, port, loaded=None, pass_fds=[fd]) == "ok"
        receiver.settimeout(5)
        assert receiver.recv(8) == b"x", "control: the datagram arrived"
        assert attempt(op, fd, port, loaded=network_filter, pass_fds=[fd]) == "EACCES"
        receiver.setblocking(False)
        with pytest.raises(BlockingIOError):
            receiver.recv(8)


def test_send_on_a_socketpair_is_denied_unless_relaxed(
    network_filter: NetworkFilter, relaxed_filter: NetworkFilter
) -> None:
    """Why asyncio programs that use threads hang under the default filter."""
    assert attempt("socketpair-send", loaded=None) == "ok"
    assert attempt("socketpair-send", loaded=network_filter) == "EACCES"
    assert attempt("socketpair-send", loaded=relaxed_filter) == "ok"
    assert [r.condition for r in relaxed_filter.rules if r.syscall == "sendto"] == [
        "a destination address is given"
    ]


def test_relaxed_filter_runs_asyncio_threads_and_still_denies_the_network(
    relaxed_filter: NetworkFilter, tcp_listener: socket.socket
) -> None:
    code = "import asyncio, time; print(asyncio.run(asyncio.to_thread(time.sleep, 0)))"
    result = spawn([sys.executable, "-I", "-S", "-c", code], relaxed_filter.load)
    assert result.stdout == "None\n", result.stderr
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as inherited:
        fd = inherited.fileno()
        assert attempt("sendto", fd, 9, loaded=relaxed_filter, pass_fds=[fd]) == "EACCES"
    with socket.socket() as inherited:
        fd = inherited.fileno()
        port = tcp_listener.getsockname()[1]
        assert attempt("connect", fd, port, loaded=relaxed_filter, pass_fds=[fd]) == "EACCES"
    assert attempt("inet", loaded=relaxed_filter) == "EACCES"
    assert_nothing_arrived(tcp_listener)


def test_unix_connect_is_denied_too(network_filter: NetworkFilter, tmp_path: Path) -> None:
    """The price of the policy: local daemons (nscd, syslog, D-Bus) are out of reach."""
    path = f"{tmp_path}/daemon.sock"
    with socket.socket(socket.AF_UNIX) as daemon:
        daemon.bind(path)
        daemon.listen()
        assert attempt("connect-unix", path, loaded=None) == "ok"
        assert attempt("connect-unix", path, loaded=network_filter) == "EACCES"


@pytest.mark.parametrize("op", ["ptrace", "process_vm_readv"])
def test_reaching_into_processes_is_denied(network_filter: NetworkFilter, op: str) -> None:
    assert attempt(op, loaded=None) == "ok"
    assert attempt(op, loaded=network_filter) == "EPERM"


def test_pidfd_getfd_is_denied(network_filter: NetworkFilter) -> None:
    number = syscall_number("pidfd_getfd")
    control = attempt("pidfd_getfd", number, loaded=None)
    if control == "ENOSYS":
        pytest.skip("the kernel has no pidfd_getfd (Linux 5.6+)")
    assert control == "ok"
    assert attempt("pidfd_getfd", number, loaded=network_filter) == "EPERM"


def test_io_uring_is_denied(network_filter: NetworkFilter) -> None:
    number = syscall_number("io_uring_setup")
    control = attempt("io_uring_setup", number, loaded=None)
    if control != "ok":
        pytest.skip(f"io_uring is unavailable here anyway ({control})")
    assert attempt("io_uring_setup", number, loaded=network_filter) == "EPERM"


@pytest.mark.skipif(not shutil.which("strace"), reason="strace is not installed")
def test_strace_cannot_trace(network_filter: NetworkFilter) -> None:
    assert spawn(["strace", "-o", "/dev/null", "true"], None).returncode == 0
    denied = spawn(["strace", "-o", "/dev/null", "true"], network_filter.load)
    assert denied.returncode != 0
    assert "Operation not permitted" in denied.stderr


@pytest.mark.skipif(not X86_64, reason="the x32 ABI exists only on x86_64")
def test_x32_syscall_numbers_kill_the_process(network_filter: NetworkFilter) -> None:
    argv = [sys.executable, "-I", "-S", "-c", ATTEMPT, "x32-socket", str(syscall_number("socket"))]
    control = spawn(argv, None)
    assert control.returncode == 0, "control: the call returns (ENOSYS where x32 is off)"
    assert control.stdout.strip() in {"ok", "ENOSYS", "EINVAL"}
    assert spawn(argv, network_filter.load).returncode == -signal.SIGSYS


@pytest.mark.skipif(not X86_64, reason="int 0x80 is the i386 entry of x86_64 kernels")
def test_i386_syscalls_kill_the_process(network_filter: NetworkFilter) -> None:
    argv = [sys.executable, "-I", "-S", "-c", ATTEMPT, "i386-socket"]
    control = spawn(argv, None)
    if control.returncode == -signal.SIGSEGV:
        pytest.skip("the kernel has no i386 emulation, so int 0x80 faults anyway")
    assert control.returncode == 0 and control.stdout.strip() == "ok", "control: a socket"
    assert spawn(argv, network_filter.load).returncode == -signal.SIGSYS


def test_the_filter_can_be_loaded_many_times(network_filter: NetworkFilter) -> None:
    script = "import socket; socket.socket(socket.AF_UNIX).close(); print('unix ok')"
    for _ in range(3):
        result = spawn([sys.executable, "-I", "-S", "-c", script], network_filter.load)
        assert result.stdout == "unix ok\n"


@pytest.mark.needs(os.geteuid() == 0, "switching to another user needs root")
def test_an_unprivileged_child_can_load_it(
    network_filter: NetworkFilter, tcp_listener: socket.socket
) -> None:
    """After ``user=`` drops root, NO_NEW_PRIVS is what lets the child install the filter."""
    argv = ["bash", "-c", f"echo > /dev/tcp/127.0.0.1/{tcp_listener.getsockname()[1]}"]
    assert spawn(argv, None, user=65534).returncode == 0
    tcp_listener.accept()[0].close()  # control: nobody may connect
    denied = spawn(argv, network_filter.load, user=65534)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    assert_nothing_arrived(tcp_listener)
