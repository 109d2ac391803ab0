"""Landlock, proven on the real kernel from outside: each denial beside a control that succeeds.

Every restricted action runs in a child restricted from ``preexec_fn`` (no ``pass_fds``:
CPython calls ``preexec_fn`` before it closes inherited descriptors, which these tests
rely on). The child reports what happened as ``ok`` or an errno name, so "denied" means
the kernel said EACCES, not that the child failed to start.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from koboi_sandbox.landlock import (
    ABI_UNSUPPORTED,
    ACCESS_FS_READ_FILE,
    ACCESS_FS_WRITE_FILE,
    Ruleset,
    abi_status,
    abi_version,
    handled_fs_access,
    restrict_self,
)

ABI, REASON = abi_status()
# Skipped without the feature, failed when CI is set (conftest: the "needs" marker).
needs_landlock = pytest.mark.needs(ABI >= 1, f"no Landlock here: {REASON}")
needs_tcp_rules = pytest.mark.needs(ABI >= 4, f"TCP rules need Landlock ABI 4 ({REASON})")

#: What a program needs to start here: the system, and the Python running the tests.
SYSTEM = [Path(p) for p in ("/usr", "/bin", "/lib", "/lib64", "/etc")]
PYTHON = sorted({Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).resolve().parent})

#: The child's side: attempt one operation, print ``ok`` or the errno's name.
ATTEMPT = r"""
import errno, os, socket, sys
op, target = sys.argv[1], sys.argv[2]
try:
    if op == "read":
        open(target).read()
    elif op == "write":
        open(target, "w").write("written")
    elif op == "list":
        os.listdir(target)
    elif op == "connect":
        socket.create_connection(("127.0.0.1", int(target)), timeout=5).close()
    elif op == "bind":
        socket.create_server(("127.0.0.1", 0)).close()
    elif op == "fstat":
        os.fstat(int(target))
except OSError as exc:
    print(errno.errorcode[exc.errno])
else:
    print("ok")
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``ro/`` and ``rw/`` to allow, ``outside/`` (a sibling of both) to deny."""
    for name in ("ro", "rw", "outside"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "file.txt").write_text(f"content of {name}")
    return tmp_path


@pytest.fixture
def ruleset(tree: Path) -> Iterator[Ruleset]:
    with Ruleset.create(
        read_only=[*SYSTEM, *PYTHON, tree / "ro"],
        read_write=[tree / "rw", Path("/dev/null")],
    ) as ruleset:
        yield ruleset


def attempt(op: str, target: object, ruleset: Ruleset | None) -> str:
    """Run ATTEMPT in a child, restricted by ``ruleset`` (None: the control)."""
    preexec = None if ruleset is None else (lambda fd=ruleset.fd: restrict_self(fd))
    return run([sys.executable, "-I", "-S", "-c", ATTEMPT, op, str(target)], preexec)


def run(
    argv: Sequence[str], preexec: Callable[[], None] | None = None, *, user: int | None = None
) -> str:
    result = subprocess.run(
        argv,
        preexec_fn=preexec,
        user=user,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, f"the child failed: {result.stderr}"
    return result.stdout.strip()


def test_abi_version_is_a_non_negative_int() -> None:
    version = abi_version()
    assert isinstance(version, int) and version >= ABI_UNSUPPORTED
    assert version == ABI
    assert (version > 0) == REASON.startswith("Landlock ABI")


def test_handled_rights_grow_with_the_abi() -> None:
    assert handled_fs_access(0) == 0
    assert handled_fs_access(1) == (1 << 13) - 1
    assert handled_fs_access(2) == (1 << 14) - 1  # + REFER
    assert handled_fs_access(3) == handled_fs_access(4) == (1 << 15) - 1  # + TRUNCATE
    assert handled_fs_access(5) == handled_fs_access(7) == (1 << 16) - 1  # + IOCTL_DEV


@needs_landlock
def test_reading_outside_the_allowed_paths_is_denied(tree: Path, ruleset: Ruleset) -> None:
    outside = tree / "outside" / "file.txt"
    assert attempt("read", outside, None) == "ok", "control: readable without Landlock"
    assert attempt("read", outside, ruleset) == "EACCES"
    assert attempt("read", tree / "ro" / "file.txt", ruleset) == "ok"
    assert attempt("read", tree / "rw" / "file.txt", ruleset) == "ok"


@needs_landlock
def test_listing_a_sibling_directory_is_denied(tree: Path, ruleset: Ruleset) -> None:
    assert attempt("list", tree / "outside", None) == "ok"
    assert attempt("list", tree / "outside", ruleset) == "EACCES"
    assert attempt("list", tree, ruleset) == "EACCES", "the common parent is not allowed either"
    assert attempt("list", tree / "ro", ruleset) == "ok"


@needs_landlock
def test_writing_needs_a_read_write_path(tree: Path, ruleset: Ruleset) -> None:
    assert attempt("write", tree / "ro" / "new.txt", None) == "ok"
    assert attempt("write", tree / "ro" / "new2.txt", ruleset) == "EACCES"
    assert attempt("write", tree / "ro" / "file.txt", ruleset) == "EACCES"
    assert not (tree / "ro" / "new2.txt").exists()
    assert (tree / "ro" / "file.txt").read_text() == "content of ro"
    assert attempt("write", tree / "rw" / "new.txt", ruleset) == "ok"
    assert (tree / "rw" / "new.txt").read_text() == "written"


@needs_landlock
def test_ordinary_commands_run_with_the_system_read_only(tree: Path, ruleset: Ruleset) -> None:
    """bash, coreutils and python3 need /usr, /etc and /dev/null, not /proc or /dev/urandom."""
    script = f"""
        set -e
        cd {tree / "rw"}
        echo hi > out.txt
        cat out.txt
        ls
        sort < out.txt
        sleep 0 & wait  # bash points a background job's stdin at /dev/null
        {sys.executable} -I -S -c 'print(6 * 7)'
        echo quiet > /dev/null
        head -c4 /dev/urandom 2> /dev/null | wc -c  # denied, so nothing is read
        echo done
    """
    output = run(["bash", "-c", script], lambda: restrict_self(ruleset.fd))
    assert output.splitlines() == ["hi", "file.txt", "out.txt", "hi", "42", "0", "done"]


@needs_landlock
@needs_tcp_rules
def test_tcp_connect_is_denied_and_nothing_reaches_the_listener(ruleset: Ruleset) -> None:
    assert ruleset.handled_access_net
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        listener.settimeout(5)
        assert attempt("connect", port, None) == "ok"
        listener.accept()[0].close()  # control: the connection arrived

        assert attempt("connect", port, ruleset) == "EACCES"
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()


@needs_landlock
@needs_tcp_rules
def test_tcp_bind_is_denied(ruleset: Ruleset) -> None:
    assert attempt("bind", 0, None) == "ok"
    assert attempt("bind", 0, ruleset) == "EACCES"


@needs_landlock
def test_without_deny_tcp_the_network_is_not_handled(tree: Path) -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        Ruleset.create(read_only=[*SYSTEM, *PYTHON], read_write=[], deny_tcp=False) as ruleset,
    ):
        assert ruleset.handled_access_net == 0
        assert attempt("connect", listener.getsockname()[1], ruleset) == "ok"
        assert attempt("read", tree / "outside" / "file.txt", ruleset) == "EACCES"


@needs_landlock
def test_a_file_rule_allows_that_file_only(tree: Path) -> None:
    file = tree / "ro" / "file.txt"
    with Ruleset.create(read_only=[*SYSTEM, *PYTHON, file], read_write=[]) as ruleset:
        assert attempt("read", file, ruleset) == "ok"
        assert attempt("list", tree / "ro", ruleset) == "EACCES"
    # read_write on a device file grants only file rights (directory rights would be EINVAL).
    with Ruleset.create(read_only=[*SYSTEM, *PYTHON], read_write=[Path("/dev/null")]) as ruleset:
        assert attempt("write", "/dev/null", ruleset) == "ok"
        assert attempt("read", "/dev/zero", ruleset) == "EACCES"


@needs_landlock
def test_missing_paths_are_skipped_and_recorded(tree: Path) -> None:
    missing = [tree / "nope", tree / "ro" / "file.txt" / "below-a-file"]
    with Ruleset.create(
        read_only=[*SYSTEM, *PYTHON, missing[0]], read_write=missing[1:]
    ) as ruleset:
        assert list(ruleset.skipped) == missing
        assert attempt("read", tree / "ro" / "file.txt", ruleset) == "EACCES"


@needs_landlock
def test_an_older_abi_can_be_pinned(tree: Path) -> None:
    with Ruleset.create(read_only=[*SYSTEM, *PYTHON], read_write=[tree / "rw"], abi=1) as ruleset:
        assert ruleset.abi == 1
        assert ruleset.handled_access_net == 0
        assert ruleset.handled_access_fs == handled_fs_access(1)
        assert attempt("read", tree / "outside" / "file.txt", ruleset) == "EACCES"
        assert attempt("write", tree / "rw" / "new.txt", ruleset) == "ok"
    with pytest.raises(ValueError, match="ABI"):
        Ruleset.create(read_only=[], read_write=[], abi=0)


@needs_landlock
def test_the_ruleset_descriptor_does_not_reach_the_program(ruleset: Ruleset) -> None:
    assert attempt("fstat", ruleset.fd, ruleset) == "EBADF"


@needs_landlock
def test_close_releases_the_descriptor_once(tree: Path) -> None:
    ruleset = Ruleset.create(read_only=[tree / "ro"], read_write=[])
    fd = ruleset.fd
    assert fd >= 0
    assert ruleset.handled_access_fs & (ACCESS_FS_READ_FILE | ACCESS_FS_WRITE_FILE)
    with ruleset:
        pass
    assert ruleset.fd == -1
    with pytest.raises(OSError) as info:
        os.fstat(fd)
    assert info.value.errno == errno.EBADF
    ruleset.close()  # idempotent


@needs_landlock
@pytest.mark.needs(os.geteuid() == 0, "switching to another user needs root")
def test_an_unprivileged_child_can_restrict_itself() -> None:
    """After ``user=`` drops root, NO_NEW_PRIVS is what lets the child enforce the ruleset."""
    # Not tmp_path: pytest's base directory is private to root, so nobody could not read
    # the file anyway and the denial would prove nothing.
    with tempfile.TemporaryDirectory(prefix="koboi-landlock-") as directory:
        Path(directory).chmod(0o755)
        readable = Path(directory) / "file.txt"
        readable.write_text("content of outside")
        readable.chmod(0o644)
        check_unprivileged_denial(["/bin/cat", str(readable)])


def check_unprivileged_denial(argv: list[str]) -> None:
    assert run(argv, user=65534) == "content of outside", "control: nobody may read it"
    with Ruleset.create(read_only=SYSTEM, read_write=[]) as ruleset:
        denied = subprocess.run(
            argv,
            preexec_fn=lambda: restrict_self(ruleset.fd),
            user=65534,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert denied.returncode != 0
    assert "Permission denied" in denied.stderr


def test_restrict_self_reports_failure_as_oserror() -> None:
    """Run in a child: NO_NEW_PRIVS, set before the failing call, must not stick to pytest."""
    code = (
        "from koboi_sandbox.landlock import restrict_self\n"
        "try:\n    restrict_self(987)\n"
        "except OSError as exc:\n    print(exc.errno, exc.strerror)\n"
    )
    output = run([sys.executable, "-c", code])
    expected = errno.EBADF if ABI > 0 else errno.ENOSYS
    assert output.startswith(f"{expected} ")
