"""What a tool's process can reach, proven from outside.

Each test has a positive control: the same action, run under ``passthrough``,
succeeds — so a "blocked" result means blocked, not broken.
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from koboi.sandbox import ProcessResult, Sandbox
from koboi_sandbox.restricted import RestrictedSandbox

pytestmark = pytest.mark.anyio

SECRET = "kb-Secret-7Yq2Lm9Xw4Zt"


async def sh(
    sandbox: Sandbox,
    script: str,
    *,
    session: str = "s1",
    timeout: float = 20,
    max_output: int = 1_000_000,
) -> ProcessResult:
    cwd = getattr(sandbox, "workdir", None) if sandbox.name == "passthrough" else None
    return await sandbox.run_process(
        ["sh", "-c", script],
        cwd=cwd,
        timeout=timeout,
        max_output=max_output,
        session_id=session,
    )


class Listener:
    """A loopback TCP listener counting every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


# -- secrets ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["OPENAI_API_KEY", "MY_SERVICE_TOKEN", "DB_PASSWORD", "LD_PRELOAD"]
)
async def test_secrets_in_the_environment_do_not_reach_the_process(
    make_sandbox: Callable[..., RestrictedSandbox],
    passthrough: Sandbox,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    value = SECRET if name != "LD_PRELOAD" else "/nonexistent/koboi-test.so"
    monkeypatch.setenv(name, value)
    script = f'printf "%s" "${{{name}:-unset}}"'
    # Control: a process given koboi's whole environment sees it (passthrough's own
    # default, env=None, already drops what is named like a credential).
    control = await passthrough.run_process(["sh", "-c", script], env=dict(os.environ), timeout=20)
    assert control.stdout == value  # the variable is there to be stolen
    result = await sh(make_sandbox(), script)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "unset"


async def test_the_parents_environ_cannot_be_read_through_proc(
    make_sandbox: Callable[..., RestrictedSandbox], passthrough: Sandbox
) -> None:
    # /proc/<pid>/environ shows the environment koboi was started with: where the
    # keys of a real deployment are. Look for one variable that is really in it.
    environ = await anyio.Path(f"/proc/{os.getpid()}/environ").read_bytes()
    first = environ.split(b"\0")[0].decode()
    name = first.split("=", 1)[0]
    script = f"tr '\\0' '\\n' < /proc/{os.getpid()}/environ | grep '^{name}='"
    control = await sh(passthrough, script)
    assert first in control.stdout, control.stderr
    for sandbox in (make_sandbox(), make_sandbox(isolation="hard")):
        result = await sh(sandbox, script)
        assert first not in result.stdout
        assert result.returncode != 0
    # Nor its memory: read 16 bytes at the start of koboi's first readable mapping.
    pid = os.getpid()
    peek = (
        'python3 -c "'
        f"m = open('/proc/{pid}/maps').readline().split()[0].split('-')[0]; "
        f"f = open('/proc/{pid}/mem', 'rb'); f.seek(int(m, 16)); "
        "print('read', len(f.read(16)))\""
    )
    assert "read 16" in (await sh(passthrough, peek)).stdout  # control: it can be read
    for sandbox in (make_sandbox(), make_sandbox(isolation="hard")):
        assert "read 16" not in (await sh(sandbox, peek)).stdout


# -- the filesystem -------------------------------------------------------------------------
#
# Other sessions, the store, the config and koboi's files: test_sessions.py, at every
# level, as root and as an ordinary user.


# -- the network under hard --------------------------------------------------------------

EGRESS = {
    "python socket": "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {port}), 2); print('connected')\"",
    "bash /dev/tcp": "bash -c 'echo hi > /dev/tcp/127.0.0.1/{port} && echo connected'",
    "curl": "curl -s -m 2 -o /dev/null http://127.0.0.1:{port}/ ; echo exit=$?",
}


@pytest.mark.hard
@pytest.mark.seccomp
@pytest.mark.parametrize("way", sorted(EGRESS))
async def test_no_network_egress_under_hard(
    make_sandbox: Callable[..., RestrictedSandbox],
    passthrough: Sandbox,
    listener: Listener,
    way: str,
) -> None:
    if way == "curl" and shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    script = EGRESS[way].format(port=listener.port)
    await sh(passthrough, script)
    await anyio.sleep(0.3)
    assert listener.accepted >= 1, "control: the listener must see the unsandboxed connection"
    before = listener.accepted
    result = await sh(make_sandbox(isolation="hard"), script)
    await anyio.sleep(0.5)
    assert listener.accepted == before, f"{way} reached the listener: {result}"
    assert "connected" not in result.stdout


@pytest.mark.hard
@pytest.mark.seccomp
async def test_an_inherited_socket_is_not_inherited(
    make_sandbox: Callable[..., RestrictedSandbox], listener: Listener
) -> None:
    client = socket.create_connection(("127.0.0.1", listener.port))
    client.set_inheritable(True)
    try:
        fd = client.fileno()
        # bash: dash cannot redirect to a descriptor above 9 at all.
        script = f"bash -c 'echo leak >&{fd}' && echo wrote"
        # Control: a child that is handed the descriptor can write through it.
        control = await anyio.run_process(["sh", "-c", script], pass_fds=(fd,), check=False)
        assert control.stdout.decode() == "wrote\n", control.stderr
        result = await sh(make_sandbox(isolation="hard"), script)
        assert "wrote" not in result.stdout
        assert result.returncode != 0
    finally:
        client.close()


# -- resources -------------------------------------------------------------------------------


@pytest.mark.slow  # a real process: runs in this member's own session
async def test_a_fork_bomb_is_contained_while_koboi_stays_responsive(
    make_sandbox: Callable[..., RestrictedSandbox], passthrough: Sandbox
) -> None:
    many = "for i in $(seq 100); do sleep 2 & done; wait; echo spawned-all"
    control = await sh(passthrough, many, timeout=20)
    assert "spawned-all" in control.stdout  # 100 processes are fine without the limit
    sandbox = make_sandbox(rlimits={"processes": 40})
    limited = await sh(sandbox, many, timeout=20)
    assert "spawned-all" not in limited.stdout or "fork" in limited.stderr
    assert "fork" in limited.stderr or "Resource temporarily unavailable" in limited.stderr

    lags: list[float] = []

    async def heartbeat() -> None:
        while True:
            started = time.monotonic()
            await anyio.sleep(0.05)
            lags.append(time.monotonic() - started - 0.05)

    async with anyio.create_task_group() as tg:
        tg.start_soon(heartbeat)
        bomb = await sh(sandbox, "bomb() { bomb | bomb & }; bomb; sleep 30", timeout=3)
        tg.cancel_scope.cancel()
    # Contained either way: the limit starves the leader too ("Cannot fork", it exits
    # and its namespace dies with it), or the timeout kills the namespace.
    assert bomb.timed_out or "Cannot fork" in bomb.stderr, bomb
    assert lags and max(lags) < 1.0, f"koboi stalled for {max(lags):.2f} s during the fork bomb"
    for _ in range(40):  # the kernel reaps the namespace's processes within moments
        left = await anyio.run_process(["pgrep", "-u", "nobody", "-f", "sh -c bomb"], check=False)
        if not left.stdout.split():
            break
        await anyio.sleep(0.05)
    assert left.stdout.split() == [], "fork bomb processes outlived the run"


async def test_a_memory_hog_is_stopped_by_the_address_space_limit(
    make_sandbox: Callable[..., RestrictedSandbox], passthrough: Sandbox
) -> None:
    hog = "python3 -c \"b = bytearray(600 * 1024 * 1024); print('allocated', len(b))\""
    control = await sh(passthrough, hog, timeout=30)
    assert "allocated" in control.stdout, control.stderr
    result = await sh(make_sandbox(rlimits={"address_space_mb": 256}), hog, timeout=30)
    assert "allocated" not in result.stdout
    assert "MemoryError" in result.stderr


# -- time ------------------------------------------------------------------------------------


@pytest.mark.slow  # a real process: runs in this member's own session
async def test_timeout_leaves_no_survivors_not_even_a_setsid_grandchild(
    make_sandbox: Callable[..., RestrictedSandbox], passthrough: Sandbox
) -> None:
    marker = "sleep 9876.5"
    # Relative paths: each sandbox's process starts in its own working directory.
    script = (
        "setsid sh -c 'sleep 2; echo alive > survivor.txt' >/dev/null 2>&1 < /dev/null & "
        f"exec {marker}"
    )
    control = await sh(passthrough, script, timeout=0.5)
    assert control.timed_out
    sandbox = make_sandbox()
    result = await sh(sandbox, script, timeout=0.5)
    assert result.timed_out
    await anyio.sleep(2.7)
    outside = Path(passthrough.workdir) / "survivor.txt"
    assert outside.exists(), "control: under passthrough the setsid grandchild escapes"
    assert not (sandbox.workdir_for("s1") / "survivor.txt").exists(), (
        "a setsid grandchild survived the sandbox's timeout"
    )
    found = await anyio.run_process(["pgrep", "-f", marker], check=False)
    assert found.stdout.split() == [], f"processes left behind: {found.stdout!r}"


# -- output ----------------------------------------------------------------------------------


async def test_100_mb_of_output_is_capped_with_bounded_memory(
    make_sandbox: Callable[..., RestrictedSandbox],
) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = await sh(
        make_sandbox(), "head -c 100000000 /dev/zero | tr '\\0' 'x'", max_output=1_000_000
    )
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert result.truncated
    assert result.stdout.startswith("x" * 1000)
    assert "99000000 bytes dropped" in result.stdout  # the command really wrote 100 MB
    assert grown_mb < 40, f"koboi's memory grew by {grown_mb:.0f} MB reading capped output"


async def test_invalid_utf8_and_terminal_escapes_are_neutralised(
    make_sandbox: Callable[..., RestrictedSandbox], passthrough: Sandbox
) -> None:
    script = r"printf 'ok \377\376 \033[31mred\033[0m \033]0;title\007 \033[2J end\n'"
    control = await sh(passthrough, script)
    assert "\x1b" in control.stdout  # the escapes are really there
    result = await sh(make_sandbox(), script)
    assert "\x1b" not in result.stdout
    assert "\x07" not in result.stdout
    assert "red" in result.stdout and "end" in result.stdout
    assert "\ufffd" in result.stdout  # invalid bytes became replacement characters


@pytest.mark.hard
async def test_ordinary_commands_work_under_hard(
    make_sandbox: Callable[..., RestrictedSandbox],
) -> None:
    """The other side of every refusal above: what a tool legitimately does still works."""
    script = (
        "echo quiet > /dev/null && ls / > /dev/null && cat /etc/hostname > /dev/null"
        " && (sleep 0.1 > /dev/null 2>&1 &) && mkdir -p a/b && echo data > a/b/f.txt"
        " && cat <<EOF > big.txt\n$(head -c 100000 /dev/zero | tr '\\0' 'x')\nEOF\n"
        " python3 -c 'import asyncio; asyncio.run(asyncio.to_thread(print, \"threads ok\"))'"
        " && git init -q repo && echo done"
    )
    result = await sh(make_sandbox(isolation="hard"), script, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "threads ok" in result.stdout
    assert result.stdout.rstrip().endswith("done")
