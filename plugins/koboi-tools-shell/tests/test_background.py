"""Background jobs: start, status, exit, kill, session ownership, limits, confinement."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from koboi.errors import ToolError
from koboi.tools import Risk, ToolContext
from koboi_sandbox.options import RestrictedOptions
from koboi_sandbox.probe import probe
from koboi_sandbox.restricted import required_gaps
from koboi_tools_shell.jobs import JobRegistry
from koboi_tools_shell.settings import ShellSettings
from koboi_tools_shell.tools import RunShell, ShellKill, ShellStatus

pytestmark = pytest.mark.anyio

CAPS = probe()
HARD_GAPS = required_gaps(RestrictedOptions(isolation="hard"), CAPS)
needs_pid_namespace = pytest.mark.skipif(not CAPS.pid_namespaces, reason="no PID namespaces here")
needs_hard = pytest.mark.skipif(bool(HARD_GAPS), reason=f"no isolation hard here: {HARD_GAPS}")


class Shell:
    """The three tools over one registry, and shortcuts that return what the model reads."""

    def __init__(self, registry: JobRegistry, call: Any, **settings: Any) -> None:
        self.run = RunShell(ShellSettings(**settings), registry)
        self.status_tool = ShellStatus(registry)
        self.kill_tool = ShellKill(registry)
        self.call = call

    async def start(self, ctx: ToolContext, command: str, **arguments: Any) -> str:
        result = await self.call(self.run, ctx, command=command, background=True, **arguments)
        assert result.content.startswith("job_id: job-")
        return str(result.data["job_id"])

    async def status(self, ctx: ToolContext, job_id: str) -> dict[str, Any]:
        result = await self.call(self.status_tool, ctx, job_id=job_id)
        return parse(result.content)

    async def kill(self, ctx: ToolContext, job_id: str) -> dict[str, Any]:
        result = await self.call(self.kill_tool, ctx, job_id=job_id)
        return parse(result.content)


def parse(content: str) -> dict[str, Any]:
    head, _, output = content.partition("\n--- output")
    fields: dict[str, Any] = dict(line.split(": ", 1) for line in head.split("\n"))
    fields["output"] = output.split("---\n", 1)[1]
    return fields


@pytest.fixture
def shell(registry: JobRegistry, call: Any) -> Shell:
    return Shell(registry, call)


def test_metadata() -> None:
    assert (ShellStatus.risk, ShellStatus.idempotent) == (Risk.SAFE, True)
    assert (ShellKill.risk, ShellKill.idempotent) == (Risk.MODERATE, True)


async def test_start_status_and_exit(
    shell: Shell, make_context: Any, sandbox_kind: str, wait_until: Any
) -> None:
    ctx = make_context(sandbox_kind)
    started = anyio.current_time()
    job = await shell.start(ctx, "echo one; echo warn >&2; sleep 1; echo two; exit 3")
    assert anyio.current_time() - started < 1, "run_shell(background=true) returns at once"

    # While it runs: its output so far.
    status = await shell.status(ctx, job)
    for _ in range(100):
        if "warn" in status["output"]:
            break
        await anyio.sleep(0.05)
        status = await shell.status(ctx, job)
    assert status["state"] == "running"
    assert status["exit_code"] == "null"
    assert status["output"] == "one\nwarn"
    assert "two" not in status["output"]

    # After it exits: the exit code and all its output.
    for _ in range(100):
        status = await shell.status(ctx, job)
        if status["state"] != "running":
            break
        await anyio.sleep(0.05)
    assert status["state"] == "exited"
    assert status["exit_code"] == "3"
    assert status["output"] == "one\nwarn\ntwo"
    assert status["truncated"] == "false"
    # Nothing of the job is left in the session's directory (its output came through a pipe).
    assert ctx.workdir is not None
    assert os.listdir(ctx.workdir) == []


async def test_status_output_is_cleaned_and_keeps_the_tail(
    registry: JobRegistry, call: Any, make_context: Any, wait_until: Any
) -> None:
    shell = Shell(registry, call, max_output_bytes=1024)
    ctx = make_context()
    small = await shell.start(ctx, r"printf '\033[32mgreen\033[0m\r\n'")
    await wait_until(
        lambda: registry.get("s1", small) is not None and registry.get("s1", small).done
    )  # type: ignore[union-attr]
    status = await shell.status(ctx, small)
    assert status["output"] == "green"  # control: the escapes were written, and removed
    assert status["truncated"] == "false"

    big = await shell.start(ctx, "head -c 5000 /dev/zero | tr '\\0' x; echo; echo END")
    await wait_until(lambda: registry.get("s1", big).done)  # type: ignore[union-attr]
    status = await shell.status(ctx, big)
    assert status["truncated"] == "true"
    assert status["output_bytes"] == "5005"
    assert status["output"].startswith("[output truncated: the first 3981 bytes were dropped]\n")
    assert status["output"].endswith("x\nEND")
    assert len(status["output"]) < 1200


async def test_kill_stops_the_job_and_its_children(
    shell: Shell, make_context: Any, sandbox_kind: str, wait_until: Any, never_appears: Any
) -> None:
    ctx = make_context(sandbox_kind)
    assert ctx.workdir is not None
    # Control: left alone, the job writes its marker.
    control = await shell.start(ctx, "echo started; sleep 0.5; touch control-marker")
    await wait_until(lambda: (ctx.workdir / "control-marker").exists())
    # The marker appears a moment before the job is seen to exit: poll for it.
    for _ in range(100):
        state = (await shell.status(ctx, control))["state"]
        if state != "running":
            break
        await anyio.sleep(0.05)
    assert state == "exited"

    job = await shell.start(
        ctx, "(sleep 1; touch child-marker) & echo started; sleep 1; touch late-marker; sleep 30"
    )
    for _ in range(100):
        if "started" in (await shell.status(ctx, job))["output"]:
            break
        await anyio.sleep(0.05)
    final = await shell.kill(ctx, job)
    assert final["state"] == "killed"
    assert final["output"] == "started"
    assert "stopped by shell_kill" in final["note"]
    assert await never_appears(ctx.workdir / "late-marker", 1.2)
    assert not (ctx.workdir / "child-marker").exists()
    # A second kill finds it ended: same outcome, said plainly.
    again = await shell.kill(ctx, job)
    assert again["state"] == "killed"
    assert "already ended" in again["note"]


@needs_pid_namespace
async def test_kill_under_restricted_reaches_a_setsid_grandchild(
    shell: Shell, make_context: Any, never_appears: Any
) -> None:
    ctx = make_context("restricted")
    assert ctx.workdir is not None
    job = await shell.start(ctx, "setsid sh -c 'sleep 0.6; touch escaped' & sleep 30")
    await anyio.sleep(0.3)
    assert (await shell.kill(ctx, job))["state"] == "killed"
    assert await never_appears(ctx.workdir / "escaped", 1.0)


async def test_a_job_has_its_own_timeout(
    shell: Shell, registry: JobRegistry, make_context: Any, sandbox_kind: str, never_appears: Any
) -> None:
    ctx = make_context(sandbox_kind)
    assert ctx.workdir is not None
    job = await shell.start(
        ctx, "echo hi; (sleep 0.6; touch child-marker) & sleep 30", timeout_seconds=0.3
    )
    assert await never_appears(ctx.workdir / "child-marker", 1.4)
    status = await shell.status(ctx, job)
    assert status["state"] == "timed_out"
    assert status["output"] == "hi"
    assert "timeout of 0.3 s" in status["note"]


async def test_job_timeouts_are_capped(registry: JobRegistry, call: Any, make_context: Any) -> None:
    shell = Shell(registry, call, background_timeout_seconds=5, max_background_timeout_seconds=20)
    ctx = make_context()
    job = await shell.start(ctx, "true", timeout_seconds=20)  # control: at the limit
    assert (await shell.status(ctx, job))["timeout_seconds"] == "20"
    default = await shell.start(ctx, "true")
    assert (await shell.status(ctx, default))["timeout_seconds"] == "5"
    with pytest.raises(ToolError, match="timeout_seconds is 21; the limit is 20"):
        await shell.start(ctx, "true", timeout_seconds=21)


async def test_another_session_can_neither_see_nor_kill_a_job(
    shell: Shell, make_context: Any, sandbox_kind: str
) -> None:
    mine, theirs = make_context(sandbox_kind, "s1"), make_context(sandbox_kind, "s2")
    job = await shell.start(mine, "sleep 30")
    with pytest.raises(ToolError, match=f"unknown job '{job}'"):
        await shell.status(theirs, job)
    with pytest.raises(ToolError, match=f"unknown job '{job}'"):
        await shell.kill(theirs, job)
    # Control: its own session sees it, still running, and can kill it.
    assert (await shell.status(mine, job))["state"] == "running"
    assert (await shell.kill(mine, job))["state"] == "killed"


async def test_unknown_job_ids(shell: Shell, make_context: Any) -> None:
    ctx = make_context()
    for job_id in ("job-000000000000", "nope", "x" * 64):
        with pytest.raises(ToolError, match="unknown job") as info:
            await shell.status(ctx, job_id)
        assert "not restored after a restart" in str(info.value)


async def test_too_many_jobs_are_refused(
    registry: JobRegistry, call: Any, make_context: Any
) -> None:
    shell = Shell(registry, call, max_background_jobs=2)
    ctx, other = make_context("passthrough", "s1"), make_context("passthrough", "s2")
    first = await shell.start(ctx, "sleep 30")
    await shell.start(ctx, "sleep 30")
    with pytest.raises(ToolError, match="already has 2 background job"):
        await shell.start(ctx, "sleep 30")
    # The limit is per session: another session still may.
    await shell.start(other, "sleep 30")
    # Control: once one ends, a new one is accepted.
    await shell.kill(ctx, first)
    await shell.start(ctx, "sleep 30")


async def test_background_mode_can_be_disabled(
    registry: JobRegistry, call: Any, make_context: Any
) -> None:
    shell = Shell(registry, call, max_background_jobs=0)
    assert "Background jobs are disabled" in shell.run.description
    with pytest.raises(ToolError, match="background jobs are disabled"):
        await shell.start(make_context(), "true")


async def test_a_job_runs_in_its_cwd(
    shell: Shell,
    registry: JobRegistry,
    make_context: Any,
    sandbox_kind: str,
    call: Any,
    wait_until: Any,
) -> None:
    ctx = make_context(sandbox_kind)
    await call(shell.run, ctx, command="mkdir sub")
    job = await shell.start(ctx, "pwd", cwd="sub")
    await wait_until(lambda: registry.get("s1", job).done)  # type: ignore[union-attr]
    assert ctx.workdir is not None
    assert (await shell.status(ctx, job))["output"] == str(ctx.workdir / "sub")
    with pytest.raises(ToolError, match="outside the working directory"):
        await shell.start(ctx, "pwd", cwd="/")


async def test_restricted_jobs_run_as_the_sandbox_user(
    shell: Shell, registry: JobRegistry, make_context: Any, wait_until: Any
) -> None:
    ctx = make_context("restricted")
    job = await shell.start(ctx, "id -u; pwd")
    await wait_until(lambda: registry.get("s1", job).done)  # type: ignore[union-attr]
    user, where = (await shell.status(ctx, job))["output"].split("\n")
    assert ctx.workdir is not None
    assert int(user) == ctx.workdir.stat().st_uid  # the session's own user
    assert int(user) != 0 or not CAPS.root
    assert where == str(ctx.workdir)


@needs_hard
async def test_jobs_work_under_hard_isolation(
    shell: Shell,
    registry: JobRegistry,
    open_dir: Path,
    make_sandbox_at: Any,
    wait_until: Any,
    never_appears: Any,
) -> None:
    sandbox = make_sandbox_at("hard", open_dir / "hard")
    ctx = ToolContext("s1", "c1", 1, sandbox, workdir=sandbox.workdir_for("s1"))
    job = await shell.start(ctx, "echo through the pipe; cat /root/.profile 2>&1; true")
    await wait_until(lambda: registry.get("s1", job).done)  # type: ignore[union-attr]
    status = await shell.status(ctx, job)
    assert status["state"] == "exited", status
    assert status["output"].startswith("through the pipe\n")
    assert "Permission denied" in status["output"] or "No such file" in status["output"]
    running = await shell.start(ctx, "echo up; sleep 1; touch late; sleep 30")
    await anyio.sleep(0.3)
    assert (await shell.kill(ctx, running))["state"] == "killed"
    assert ctx.workdir is not None
    assert await never_appears(ctx.workdir / "late", 1.2)


async def test_without_a_workdir_a_job_runs_in_the_current_directory_and_leaves_nothing(
    shell: Shell,
    registry: JobRegistry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    wait_until: Any,
) -> None:
    from koboi.sandbox import PassthroughSandbox

    monkeypatch.chdir(tmp_path)
    ctx = ToolContext("s1", "c1", 1, PassthroughSandbox())
    job = await shell.start(ctx, "echo hello; pwd")
    await wait_until(lambda: registry.get("s1", job).done)  # type: ignore[union-attr]
    assert (await shell.status(ctx, job))["output"] == f"hello\n{tmp_path}"
    assert os.listdir(tmp_path) == []


async def test_shutdown_kills_every_job(
    shell: Shell, registry: JobRegistry, make_context: Any, sandbox_kind: str, never_appears: Any
) -> None:
    ctx = make_context(sandbox_kind)
    assert ctx.workdir is not None
    job = await shell.start(ctx, "sleep 1; touch late; sleep 30")
    await anyio.sleep(0.2)
    await anyio.to_thread.run_sync(registry.shutdown)
    status = await shell.status(ctx, job)
    assert status["state"] == "killed"
    assert "shutting down" in status["note"]
    assert await never_appears(ctx.workdir / "late", 1.2)
    # The registry starts again when needed (control: it still works).
    again = await shell.start(ctx, "echo back")
    assert (await shell.kill(ctx, again))["state"] in ("killed", "exited")


async def test_the_default_registry_is_shared_by_tools_built_for_agents(
    make_context: Any, call: Any
) -> None:
    from koboi_tools_shell.jobs import JOBS
    from koboi_tools_shell.tools import make_run_shell, make_shell_kill, make_shell_status

    run, status, kill = make_run_shell(None), make_shell_status(None), make_shell_kill(None)
    assert run.registry is status.registry is kill.registry is JOBS
    ctx = make_context("passthrough", "shared-registry-session")
    started = await call(run, ctx, command="sleep 30", background=True)
    job_id = started.data["job_id"]
    assert "state: running" in (await call(status, ctx, job_id=job_id)).content
    assert "state: killed" in (await call(kill, ctx, job_id=job_id)).content
