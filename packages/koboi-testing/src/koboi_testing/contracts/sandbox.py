"""Contract suite for :class:`koboi.sandbox.Sandbox` implementations."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import anyio
import pytest
from anyio.abc import ByteReceiveStream

from koboi.errors import SandboxError, ToolError
from koboi.sandbox import ProcessResult, Sandbox, SandboxProcess
from koboi.tools import ToolContext, tool

#: How long the "kill" tests let a surviving process write its marker file.
_SURVIVOR_DELAY = 1.0
#: The session the open_process tests start their processes for.
_SESSION = "contract-session"
#: How long a killed process may take to be gone (a zombie counts as gone).
_GONE_WITHIN = 5.0
_STREAM_ENDED = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError)


@tool(name="contract_echo", idempotent=True, thread=False)
def contract_echo(text: str) -> str:
    """Return the text unchanged (the trivial tool :class:`SandboxContract` runs).

    Args:
        text: What to return.
    """
    return text


@tool(name="contract_fail", thread=False)
def contract_fail(reason: str) -> str:
    """Always fail with a :class:`~koboi.errors.ToolError` carrying ``reason``.

    Args:
        reason: The error message.
    """
    raise ToolError(reason)


class SandboxContract:
    """Behaviour every :class:`~koboi.sandbox.Sandbox` must show.

    The commands run are POSIX ``sh`` one-liners using ``echo``, ``printf``,
    ``cat``, ``sleep``, ``yes`` and ``head`` (coreutils or busybox).

    **Required fixture** ``sandbox``: the sandbox under test, ready to use (the
    suite does not call ``aclose()``; do it in the fixture's teardown).

    **Optional fixture** ``sandbox_workdir`` (override in the subclass): a
    directory that is both a ``cwd`` the sandboxed processes can use *and*
    visible to the test at the same path, so the suite can create files for
    the processes and look for files they write. Default: ``tmp_path``.

    Processes in the sandbox must see ``PATH`` when the suite passes an explicit
    ``env`` containing it.

    The ``open_process`` tests find the processes a sandbox started by a unique
    marker in their command line (through ``/proc``, else ``pgrep -f``), as seen
    from outside the sandbox: killing "the whole tree" is checked on the real
    processes, not on what the sandbox reports.
    """

    @pytest.fixture
    def sandbox_workdir(self, tmp_path: Path) -> Path:
        return tmp_path

    @staticmethod
    def _env(**extra: str) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **extra}

    async def _sh(
        self,
        sandbox: Sandbox,
        script: str,
        *,
        cwd: Path | None = None,
        time_limit: float = 20,
        max_output: int = 1_000_000,
    ) -> ProcessResult:
        result = await sandbox.run_process(
            ["sh", "-c", script], cwd=cwd, timeout=time_limit, max_output=max_output
        )
        assert isinstance(result, ProcessResult)
        return result

    # -- description -------------------------------------------------------

    def test_describe_names_the_backend(self, sandbox: Sandbox) -> None:
        described = sandbox.describe()
        assert isinstance(described, dict)
        assert isinstance(described.get("backend"), str)
        assert described["backend"]
        # It is written to the journal and printed by `koboi sandbox check`.
        json.dumps(described)

    def test_has_a_name(self, sandbox: Sandbox) -> None:
        assert isinstance(sandbox.name, str)
        assert sandbox.name

    # -- processes: output, exit code, input, env, cwd ----------------------

    @pytest.mark.anyio
    async def test_stdout_and_exit_code(self, sandbox: Sandbox) -> None:
        result = await sandbox.run_process(["echo", "hello"], timeout=20)
        assert result.stdout == "hello\n"
        assert result.stderr == ""
        assert result.returncode == 0
        assert result.timed_out is False
        assert result.truncated is False

    @pytest.mark.anyio
    async def test_non_zero_exit_code(self, sandbox: Sandbox) -> None:
        result = await self._sh(sandbox, "exit 3")
        assert result.returncode == 3
        assert result.timed_out is False

    @pytest.mark.anyio
    async def test_stderr_is_kept_apart(self, sandbox: Sandbox) -> None:
        result = await self._sh(sandbox, "echo out; echo err >&2")
        assert result.stdout == "out\n"
        assert result.stderr == "err\n"

    @pytest.mark.anyio
    async def test_unicode_output(self, sandbox: Sandbox) -> None:
        result = await self._sh(sandbox, "printf 'h\\303\\251llo \\342\\230\\203'")
        assert result.stdout == "héllo ☃"

    @pytest.mark.anyio
    async def test_input_is_fed_to_stdin(self, sandbox: Sandbox) -> None:
        result = await sandbox.run_process(["cat"], input=b"line one\nline two\n", timeout=20)
        assert result.stdout == "line one\nline two\n"
        assert result.returncode == 0

    @pytest.mark.anyio
    async def test_input_the_command_does_not_read_is_no_error(self, sandbox: Sandbox) -> None:
        # The command exits without reading; the pipe breaks. That is the
        # command's business, not a sandbox failure.
        result = await sandbox.run_process(
            ["sh", "-c", "echo ignored"], input=b"x" * 1_000_000, timeout=20
        )
        assert result.returncode == 0
        assert result.stdout == "ignored\n"

    @pytest.mark.anyio
    async def test_env_is_passed(self, sandbox: Sandbox) -> None:
        result = await sandbox.run_process(
            ["sh", "-c", 'printf %s "$KOBOI_CONTRACT_VAR"'],
            env=self._env(KOBOI_CONTRACT_VAR="value with spaces ✓"),
            timeout=20,
        )
        assert result.stdout == "value with spaces ✓"

    @pytest.mark.anyio
    async def test_explicit_env_does_not_leak_the_agent_environment(
        self, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("KOBOI_CONTRACT_SECRET", "s3cr3t")
        result = await sandbox.run_process(
            ["sh", "-c", 'printf "[%s]" "$KOBOI_CONTRACT_SECRET"'], env=self._env(), timeout=20
        )
        assert result.stdout == "[]"

    @pytest.mark.anyio
    async def test_cwd_is_honoured(self, sandbox: Sandbox, sandbox_workdir: Path) -> None:
        (sandbox_workdir / "given.txt").write_text("from the test\n")
        result = await self._sh(
            sandbox, "cat given.txt && echo from the process > written.txt", cwd=sandbox_workdir
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == "from the test\n"
        assert (sandbox_workdir / "written.txt").read_text() == "from the process\n"

    @pytest.mark.anyio
    async def test_concurrent_processes_keep_their_output_apart(self, sandbox: Sandbox) -> None:
        results: dict[int, ProcessResult] = {}

        async def run(i: int) -> None:
            results[i] = await self._sh(sandbox, f"sleep 0.1; echo {i}")

        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(run, i)
        assert {i: r.stdout for i, r in results.items()} == {i: f"{i}\n" for i in range(5)}

    @pytest.mark.anyio
    async def test_missing_command_is_not_a_success(self, sandbox: Sandbox) -> None:
        try:
            result = await sandbox.run_process(["koboi-contract-no-such-command"], timeout=20)
        except (OSError, SandboxError):
            return
        assert result.returncode != 0

    @pytest.mark.anyio
    async def test_empty_argv_is_refused(self, sandbox: Sandbox) -> None:
        with pytest.raises((ValueError, SandboxError)):
            await sandbox.run_process([], timeout=20)

    # -- timeouts ----------------------------------------------------------

    @pytest.mark.anyio
    async def test_timeout_returns_promptly(self, sandbox: Sandbox) -> None:
        started = time.monotonic()
        result = await sandbox.run_process(["sleep", "30"], timeout=0.5)
        elapsed = time.monotonic() - started
        assert result.timed_out is True
        assert result.returncode != 0
        assert elapsed < 5, f"run_process took {elapsed:.1f}s to honour a 0.5s timeout"

    @pytest.mark.anyio
    async def test_timeout_kills_the_command_and_its_children(
        self, sandbox: Sandbox, sandbox_workdir: Path
    ) -> None:
        # A grandchild that ignores SIGTERM/SIGHUP/SIGINT and has let go of the
        # output pipes; it must still die with the command. If either survives,
        # it writes its marker file after _SURVIVOR_DELAY.
        script = (
            f"(trap '' TERM HUP INT; sleep {_SURVIVOR_DELAY}; echo x > grandchild.txt)"
            " >/dev/null 2>&1 </dev/null &"
            f" sleep {_SURVIVOR_DELAY}; echo x > leader.txt"
        )
        result = await self._sh(sandbox, script, cwd=sandbox_workdir, time_limit=0.3)
        assert result.timed_out is True
        await anyio.sleep(_SURVIVOR_DELAY + 0.7)
        assert not (sandbox_workdir / "leader.txt").exists(), "the command survived its timeout"
        assert not (sandbox_workdir / "grandchild.txt").exists(), (
            "a background child of the command survived the timeout"
        )

    @pytest.mark.anyio
    async def test_leftover_background_processes_are_killed(
        self, sandbox: Sandbox, sandbox_workdir: Path
    ) -> None:
        script = (
            f"(sleep {_SURVIVOR_DELAY}; echo x > leftover.txt) >/dev/null 2>&1 </dev/null &"
            " echo started"
        )
        result = await self._sh(sandbox, script, cwd=sandbox_workdir)
        assert result.returncode == 0
        assert result.stdout == "started\n"
        await anyio.sleep(_SURVIVOR_DELAY + 0.7)
        assert not (sandbox_workdir / "leftover.txt").exists(), (
            "a background process outlived the command that started it"
        )

    @pytest.mark.anyio
    async def test_background_child_holding_the_output_does_not_stall(
        self, sandbox: Sandbox
    ) -> None:
        # The child inherits stdout/stderr; waiting for EOF on them would wait
        # for the child, not for the command.
        started = time.monotonic()
        result = await self._sh(sandbox, "sleep 30 & echo done", time_limit=10)
        elapsed = time.monotonic() - started
        assert result.stdout == "done\n"
        assert result.returncode == 0
        assert result.timed_out is False
        assert elapsed < 5, f"run_process waited {elapsed:.1f}s for a background child"

    # -- output cap ----------------------------------------------------------

    @pytest.mark.anyio
    @pytest.mark.parametrize("stream", ["stdout", "stderr"])
    async def test_output_is_capped(self, sandbox: Sandbox, stream: str) -> None:
        redirect = ">&2" if stream == "stderr" else ""
        result = await self._sh(
            sandbox, f"yes abcdefghi | head -c 1000000 {redirect}", max_output=1000
        )
        text = getattr(result, stream)
        assert result.truncated is True
        assert result.returncode == 0, (
            "the command must run to completion, not block on a full pipe"
        )
        assert len(text) <= 1000 + 200, f"{stream} holds {len(text)} characters"
        assert text.startswith("abcdefghi\nabcdefghi\n"), "the head of the output is kept"
        assert "truncated" in text.lower(), "the reader must be told the output was cut"

    @pytest.mark.anyio
    async def test_small_output_is_not_marked_truncated(self, sandbox: Sandbox) -> None:
        result = await self._sh(sandbox, "printf 0123456789", max_output=1000)
        assert result.stdout == "0123456789"
        assert result.truncated is False

    # -- tools ---------------------------------------------------------------

    @pytest.mark.anyio
    async def test_run_tool_returns_the_tools_result(
        self, sandbox: Sandbox, sandbox_workdir: Path
    ) -> None:
        ctx = ToolContext(
            session_id="contract-session",
            call_id="call-1",
            step=1,
            sandbox=sandbox,
            workdir=sandbox_workdir,
        )
        args = contract_echo.parse_arguments({"text": "héllo"})
        result = await sandbox.run_tool(contract_echo, args, ctx)
        assert result.content == "héllo"
        assert result.is_error is False

    @pytest.mark.anyio
    async def test_run_tool_lets_tool_errors_through(
        self, sandbox: Sandbox, sandbox_workdir: Path
    ) -> None:
        ctx = ToolContext(
            session_id="contract-session",
            call_id="call-2",
            step=1,
            sandbox=sandbox,
            workdir=sandbox_workdir,
        )
        args = contract_fail.parse_arguments({"reason": "disk on fire"})
        with pytest.raises(ToolError, match="disk on fire"):
            await sandbox.run_tool(contract_fail, args, ctx)

    # -- long-lived processes (open_process) -----------------------------------

    def _open(self, sandbox: Sandbox, argv: list[str], **options: object) -> SandboxProcess:
        options.setdefault("session_id", _SESSION)
        process = sandbox.open_process(argv, **options)  # type: ignore[arg-type]
        assert isinstance(process, SandboxProcess)
        return process

    @pytest.mark.anyio
    async def test_open_process_round_trip_over_stdin_and_stdout(self, sandbox: Sandbox) -> None:
        async with self._open(sandbox, ["cat"]) as process:
            for line in (b"line one\n", b"line two \xe2\x9c\x93\n"):
                await process.stdin.send(line)
                assert await _read_until(process.stdout, line) == line
            await process.stdin.aclose()
            assert await _read_all(process.stdout) == b""
            with anyio.fail_after(10):
                assert await process.wait() == 0

    @pytest.mark.anyio
    async def test_open_process_streams_carry_raw_bytes(self, sandbox: Sandbox) -> None:
        # A stdio protocol needs every byte as sent: no decoding, no escapes stripped.
        payload = bytes(range(256)) * 4
        async with self._open(sandbox, ["cat"]) as process:
            await process.stdin.send(payload)
            await process.stdin.aclose()
            assert await _read_all(process.stdout) == payload

    @pytest.mark.anyio
    @pytest.mark.parametrize("mode", ["pipe", "stdout", "discard"])
    async def test_open_process_stderr_modes(self, sandbox: Sandbox, mode: str) -> None:
        script = "echo out; echo err >&2"
        async with self._open(sandbox, ["sh", "-c", script], stderr=mode) as process:
            await process.stdin.aclose()
            out = await _read_all(process.stdout)
            if mode == "pipe":
                assert process.stderr is not None
                assert await _read_all(process.stderr) == b"err\n"
                assert out == b"out\n"
            elif mode == "stdout":
                assert process.stderr is None
                assert sorted(out.splitlines()) == [b"err", b"out"]
            else:
                assert process.stderr is None
                assert out == b"out\n"
            with anyio.fail_after(10):
                assert await process.wait() == 0

    @pytest.mark.anyio
    async def test_open_process_starts_in_the_sessions_workdir(self, sandbox: Sandbox) -> None:
        expected = sandbox.workdir_for(_SESSION) or Path.cwd()
        async with self._open(sandbox, ["sh", "-c", "pwd -P"]) as process:
            await process.stdin.aclose()
            out = await _read_all(process.stdout)
        assert out.decode().strip() == str(await anyio.Path(expected).resolve())

    @pytest.mark.anyio
    async def test_open_process_gets_no_secret_from_koboi_environment(
        self, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("KOBOI_CONTRACT_API_KEY", "s3cr3t-contract")
        script = 'printf "[%s]" "$KOBOI_CONTRACT_API_KEY"'
        # An explicit environment is the whole environment; given none, a sandbox that
        # isolates builds one from nothing and one that does not drops what is named
        # like a credential (koboi.sandbox.inherited_environment).
        for env in [self._env(), None]:
            async with self._open(sandbox, ["sh", "-c", script], env=env) as process:
                await process.stdin.aclose()
                assert await _read_all(process.stdout) == b"[]", f"env={env!r}"

    @pytest.mark.anyio
    async def test_run_process_gets_no_secret_from_koboi_environment(
        self, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("KOBOI_CONTRACT_API_KEY", "s3cr3t-contract")
        script = 'printf "[%s]" "$KOBOI_CONTRACT_API_KEY"'
        for env in [self._env(), None]:
            result = await sandbox.run_process(["sh", "-c", script], env=env, timeout=20)
            assert result.returncode == 0, result.stderr
            assert result.stdout == "[]", f"env={env!r}"

    @pytest.mark.anyio
    async def test_open_process_close_kills_the_whole_tree(self, sandbox: Sandbox) -> None:
        child, grandchild = _marker(), _marker()
        script = f"sleep {grandchild} </dev/null >/dev/null 2>&1 & echo started; exec sleep {child}"
        async with self._open(sandbox, ["sh", "-c", script]) as process:
            await _read_until(process.stdout, b"started\n")
            pids = await _find_processes([child, grandchild])
        assert await _all_gone(pids), "a process of the tree outlived the close"

    @pytest.mark.anyio
    async def test_open_process_close_while_a_reader_is_blocked(self, sandbox: Sandbox) -> None:
        marker = _marker()
        outcome: dict[str, object] = {}
        async with self._open(sandbox, ["sleep", marker]) as process:
            pids = await _find_processes([marker])

            async def read() -> None:
                try:
                    outcome["data"] = await process.stdout.receive()
                except _STREAM_ENDED as exc:
                    outcome["ended"] = type(exc).__name__

            async with anyio.create_task_group() as group:
                group.start_soon(read)
                await anyio.sleep(0.2)  # the reader is blocked: sleep prints nothing
                started = time.monotonic()
                with anyio.fail_after(10):
                    await process.aclose()
        assert time.monotonic() - started < 5
        assert "ended" in outcome, outcome
        assert await _all_gone(pids)

    @pytest.mark.anyio
    async def test_open_process_is_killed_when_its_task_is_cancelled(
        self, sandbox: Sandbox
    ) -> None:
        marker = _marker()
        found: list[int] = []
        ready = anyio.Event()

        async def hold() -> None:
            async with self._open(sandbox, ["sh", "-c", f"echo up; exec sleep {marker}"]) as p:
                await _read_until(p.stdout, b"up\n")
                found.extend(await _find_processes([marker]))
                ready.set()
                await anyio.sleep_forever()

        async with anyio.create_task_group() as group:
            group.start_soon(hold)
            with anyio.fail_after(20):
                await ready.wait()
            group.cancel_scope.cancel()  # the close runs in a cancelled task
        assert await _all_gone(found), "the process outlived its cancelled task"

    @pytest.mark.anyio
    async def test_open_process_refuses_what_run_process_refuses(
        self, sandbox: Sandbox, sandbox_workdir: Path
    ) -> None:
        # A program in the working directory: a sandbox with an allow-list of where
        # commands come from refuses it; then open_process must refuse it too.
        program = sandbox_workdir / "contract-program.sh"
        program.write_text("#!/bin/sh\necho ran\n")
        program.chmod(0o755)
        try:
            result = await sandbox.run_process([str(program)], cwd=sandbox_workdir, timeout=20)
        except SandboxError:
            with pytest.raises(SandboxError):
                async with sandbox.open_process([str(program)], cwd=sandbox_workdir):
                    pass
            return
        assert result.stdout == "ran\n"  # control: allowed by run_process, so here too
        async with sandbox.open_process([str(program)], cwd=sandbox_workdir) as process:
            await process.stdin.aclose()
            assert await _read_all(process.stdout) == b"ran\n"

    @pytest.mark.anyio
    async def test_open_process_with_empty_argv_is_refused(self, sandbox: Sandbox) -> None:
        with pytest.raises((ValueError, SandboxError)):
            async with sandbox.open_process([]):
                pass


def _marker() -> str:
    """A sleep duration no other process on the machine has in its command line."""
    return f"{9000 + secrets.randbelow(900)}.{secrets.randbelow(10**9):09d}"


async def _read_until(stream: ByteReceiveStream, wanted: bytes, timeout: float = 10) -> bytes:
    """Everything read until ``wanted`` has arrived (it may come in pieces)."""
    data = b""
    with anyio.fail_after(timeout):
        while wanted not in data:
            data += await stream.receive()
    return data


async def _read_all(stream: ByteReceiveStream | None, timeout: float = 10) -> bytes:
    """Everything until end of stream."""
    chunks: list[bytes] = []
    if stream is None:
        return b""
    with anyio.fail_after(timeout):
        try:
            while True:
                chunks.append(await stream.receive())
        except _STREAM_ENDED:
            pass
    return b"".join(chunks)


def _command_lines() -> dict[int, str]:
    """Every process's command line, as this (unconfined) process sees it."""
    proc = Path("/proc")
    if not (proc / "self" / "cmdline").exists():
        listed = subprocess.run(
            ["ps", "-A", "-o", "pid=", "-o", "args="], capture_output=True, text=True, check=False
        )
        found = {}
        for line in listed.stdout.splitlines():
            pid, _, args = line.strip().partition(" ")
            if pid.isdigit():
                found[int(pid)] = args
        return found
    found = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
            except OSError:
                continue
    return found


async def _find_processes(markers: Iterable[str], timeout: float = 10) -> list[int]:
    """The pids of the processes whose command lines hold each marker (one each at least)."""
    wanted = list(markers)
    with anyio.fail_after(timeout):
        while True:
            lines = _command_lines()
            pids = {m: [pid for pid, line in lines.items() if m in line] for m in wanted}
            if all(pids.values()):
                return sorted({pid for found in pids.values() for pid in found})
            await anyio.sleep(0.05)


def _alive(pid: int) -> bool:
    """Running (a zombie is not: it is dead and only waits to be reaped)."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.joinpath("self", "stat").exists():
        try:
            return stat.read_text().rpartition(")")[2].split()[0] != "Z"
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _all_gone(pids: Iterable[int], within: float = _GONE_WITHIN) -> bool:
    deadline = time.monotonic() + within
    pending = list(pids)
    while pending and time.monotonic() < deadline:
        pending = [pid for pid in pending if _alive(pid)]
        if pending:
            await anyio.sleep(0.05)
    return not pending
