"""Contract suite for :class:`koboi.sandbox.Sandbox` implementations."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import anyio
import pytest

from koboi.errors import SandboxError, ToolError
from koboi.sandbox import ProcessResult, Sandbox
from koboi.tools import ToolContext, tool

#: How long the "kill" tests let a surviving process write its marker file.
_SURVIVOR_DELAY = 1.0


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
