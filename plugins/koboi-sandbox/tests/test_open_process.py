"""``RestrictedSandbox.open_process``: a long-lived process with run_process's confinement.

The contract (test_contract.py) covers what every backend must do; this is what
``restricted`` adds — each confinement of ``run_process`` holds for a long-lived
process too, each with its control.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from anyio.abc import ByteReceiveStream

from koboi.errors import SandboxError
from koboi.sandbox import SandboxProcess
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import probe
from koboi_sandbox.restricted import RestrictedSandbox

pytestmark = pytest.mark.anyio
CAPS = probe()


async def _output(process: SandboxProcess, stream: ByteReceiveStream | None = None) -> bytes:
    await process.stdin.aclose()
    chunks = []
    with anyio.fail_after(20):
        try:
            while True:
                chunks.append(await (stream or process.stdout).receive())
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            pass
    return b"".join(chunks)


async def _run(sandbox: RestrictedSandbox, script: str, **options: object) -> bytes:
    options.setdefault("session_id", "s1")
    async with sandbox.open_process(["sh", "-c", script], **options) as process:  # type: ignore[arg-type]
        return await _output(process)


def _pids_with(marker: str) -> list[int]:
    """The processes running exactly ``sleep <marker>``. Not any whose command line holds
    the marker: the ``sh -c`` script that starts them holds it too, and so does each
    child it has forked and not yet turned into ``sleep`` (under load, long enough for a
    poll to take the shell for the sleep it is about to start)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", marker.encode()]:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _gone(pids: list[int], within: float = 5.0) -> bool:
    with anyio.move_on_after(within):
        while any(_alive(p) for p in pids):  # noqa: ASYNC110 - polls processes elsewhere
            await anyio.sleep(0.05)
    return not any(_alive(p) for p in pids)


# -- refusals ---------------------------------------------------------------------------


async def test_a_program_outside_the_allow_list_is_refused_before_anything_starts(
    make_sandbox: Callable[..., RestrictedSandbox], open_dir: Path
) -> None:
    sandbox = make_sandbox(path=["/usr/bin"])
    program = open_dir / "tool.sh"
    program.write_text("#!/bin/sh\necho ran > /tmp/koboi-should-not-run\n")
    program.chmod(0o755)
    assert await _run(sandbox, "echo allowed") == b"allowed\n"  # control
    for argv in ([str(program)], ["koboi-no-such-program"], ["/sbin/../opt/x"]):
        with pytest.raises(SandboxError, match=r"allowed directories|not in an allowed"):
            sandbox.open_process(argv, session_id="s1")
    assert not await anyio.Path("/tmp/koboi-should-not-run").exists()


async def test_a_cwd_outside_the_sessions_workdir_is_refused(
    make_sandbox: Callable[..., RestrictedSandbox],
) -> None:
    sandbox = make_sandbox()
    inside = sandbox.workdir_for("s1")
    (inside / "sub").mkdir()
    os.chown(inside / "sub", inside.stat().st_uid, inside.stat().st_gid)
    assert await _run(sandbox, "pwd", cwd=inside / "sub") == f"{inside / 'sub'}\n".encode()
    for outside in (sandbox.workdir_for("s2"), Path("/"), inside.parent):
        with pytest.raises(SandboxError, match="outside the session's workdir"):
            sandbox.open_process(["pwd"], cwd=outside, session_id="s1")


# -- what the process gets --------------------------------------------------------------


async def test_the_environment_is_built_from_nothing(
    make_sandbox: Callable[..., RestrictedSandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-koboi-test")
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent/koboi.so")
    sandbox = make_sandbox()
    workdir = sandbox.workdir_for("s1")
    seen = await _run(sandbox, "env", env={"MY_TOKEN": "t0k", "FINE": "yes"})
    env = dict(line.split("=", 1) for line in seen.decode().splitlines())
    assert env["FINE"] == "yes"  # control: what the tool asks for gets through...
    assert "MY_TOKEN" not in env  # ...unless its name is a secret's
    assert "OPENAI_API_KEY" not in env and "LD_PRELOAD" not in env
    assert env["PATH"] == ":".join(sandbox.options.path)
    assert env["HOME"] == env["TMPDIR"] == str(workdir)


async def test_limits_and_umask_apply(make_sandbox: Callable[..., RestrictedSandbox]) -> None:
    sandbox = make_sandbox(rlimits={"open_files": 64, "cpu_seconds": 7})
    out = await _run(sandbox, "ulimit -n; ulimit -t; umask")
    assert out.split() == [b"64", b"7", b"0077"]


async def test_it_runs_as_the_sessions_own_user(
    make_sandbox: Callable[..., RestrictedSandbox],
) -> None:
    sandbox = make_sandbox()
    owner = sandbox.workdir_for("s1").stat().st_uid
    if CAPS.root:
        assert (await _run(sandbox, "id -u")).strip() == str(owner).encode()
        assert owner != sandbox.workdir_for("s2").stat().st_uid
    else:
        assert owner == os.geteuid()


async def test_the_streams_are_raw_unlike_run_process(
    make_sandbox: Callable[..., RestrictedSandbox],
) -> None:
    sandbox = make_sandbox()
    script = r"printf '\033[31mred\033[0m \377'"
    captured = await sandbox.run_process(["sh", "-c", script], session_id="s1", timeout=20)
    assert "\x1b" not in captured.stdout  # control: run_process neutralises
    assert await _run(sandbox, script) == b"\x1b[31mred\x1b[0m \xff"


async def test_landlock_applies_as_to_run_process(
    make_sandbox: Callable[..., RestrictedSandbox],
    open_dir: Path,
    require: Callable[[bool, str], None],
) -> None:
    require(CAPS.landlock_abi >= 1, f"no Landlock here: {CAPS.landlock_reason}")
    sandbox = make_sandbox()
    other = sandbox.workdir_for("s2")
    (other / "theirs.txt").write_text("theirs")
    (other / "theirs.txt").chmod(0o644)
    outside = open_dir / "outside.txt"
    outside.write_text("outside")
    outside.chmod(0o644)
    assert await _run(sandbox, "echo mine > mine.txt; cat mine.txt") == b"mine\n"  # control
    out = await _run(
        sandbox, f"cat {outside} {other}/theirs.txt 2>&1; ls /proc 2>&1", stderr="stdout"
    )
    assert b"Permission denied" in out
    assert b"outside" not in out.replace(str(outside).encode(), b"")
    assert b"theirs" not in out.replace(f"{other}/theirs.txt".encode(), b"")


@pytest.mark.hard
async def test_hard_denies_the_network_to_a_long_lived_process(
    make_sandbox: Callable[..., RestrictedSandbox],
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        script = (
            "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
            f"{port}), 2); print('connected')\" 2>&1"
        )
        standard = await _run(make_sandbox(), script)
        assert b"connected" in standard  # control: standard lets it through
        hard = await _run(make_sandbox(isolation="hard"), script)
        assert b"connected" not in hard and b"Permission denied" in hard


async def test_the_landlock_ruleset_is_not_left_open(
    make_sandbox: Callable[..., RestrictedSandbox],
) -> None:
    sandbox = make_sandbox()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        assert await _run(sandbox, "echo x") == b"x\n"
    # A process that is never entered holds nothing either.
    for _ in range(20):
        sandbox.open_process(["true"], session_id="s1")
    assert len(os.listdir("/proc/self/fd")) <= before


# -- what dies on close --------------------------------------------------------------------


async def test_close_kills_a_setsid_escapee_under_a_pid_namespace(
    make_sandbox: Callable[..., RestrictedSandbox], require: Callable[[bool, str], None]
) -> None:
    require(CAPS.pid_namespaces, "no PID namespaces here")
    marker = f"7{secrets.randbelow(900) + 100}.{secrets.randbelow(10**9):09d}"
    sandbox = make_sandbox()
    script = f"setsid sleep {marker} </dev/null >/dev/null 2>&1 & echo up; exec sleep 60"
    async with sandbox.open_process(["sh", "-c", script], session_id="s1") as process:
        with anyio.fail_after(10):
            await process.stdout.receive()
            while not _pids_with(marker):  # noqa: ASYNC110 - polls processes elsewhere
                await anyio.sleep(0.05)
        escaped = _pids_with(marker)
    assert await _gone(escaped), "a setsid grandchild outlived the close"


async def test_without_a_pid_namespace_only_the_process_group_dies(
    make_sandbox: Callable[..., RestrictedSandbox], open_dir: Path
) -> None:
    """What holds without PID namespaces (some containers): the group, not escapees."""
    caps = dataclasses.replace(CAPS, pid_namespaces=False)
    sandbox = RestrictedSandbox(
        RestrictedOptions(workdir=str(open_dir / "no-pidns")), capabilities=caps
    )
    grouped = f"6{secrets.randbelow(900) + 100}.{secrets.randbelow(10**9):09d}"
    escaped = f"5{secrets.randbelow(900) + 100}.{secrets.randbelow(10**9):09d}"
    script = (
        f"sleep {grouped} </dev/null >/dev/null 2>&1 & "
        f"setsid sleep {escaped} </dev/null >/dev/null 2>&1 & echo up; exec sleep 60"
    )
    async with sandbox.open_process(["sh", "-c", script], session_id="s1") as process:
        with anyio.fail_after(10):
            await process.stdout.receive()
            while not (_pids_with(grouped) and _pids_with(escaped)):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        in_group, outside = _pids_with(grouped), _pids_with(escaped)
    try:
        assert await _gone(in_group), "the process group outlived the close"
        assert not await _gone(outside, within=0.5), "documented: a setsid escapee survives"
    finally:
        for pid in outside:
            os.kill(pid, signal.SIGKILL)
