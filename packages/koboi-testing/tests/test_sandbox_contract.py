"""The sandbox contract, run against the in-kernel PassthroughSandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from koboi.sandbox import PassthroughSandbox
from koboi_testing.contracts import SandboxContract


class TestPassthroughSandbox(SandboxContract):
    @pytest.fixture
    def sandbox(self, tmp_path: Path) -> PassthroughSandbox:
        return PassthroughSandbox(workdir=tmp_path)

    @pytest.mark.anyio
    async def test_default_cwd_is_the_workdir(
        self, sandbox: PassthroughSandbox, tmp_path: Path
    ) -> None:
        (tmp_path / "here.txt").write_text("yes")
        result = await sandbox.run_process(["cat", "here.txt"], timeout=20)
        assert result.stdout == "yes"

    def test_describe_says_there_is_no_isolation(self, sandbox: PassthroughSandbox) -> None:
        assert sandbox.describe() == {"backend": "passthrough", "isolation": "none"}


@pytest.mark.anyio
async def test_the_contracts_tree_check_sees_a_survivor() -> None:
    """The control of the contract's "whole tree killed" test: a backend that kills only
    the process it started (not its group) is caught."""
    import contextlib
    import os
    import signal

    import anyio

    from koboi_testing.contracts import sandbox as contract

    marker = contract._marker()
    process = await anyio.open_process(
        ["sh", "-c", f"sleep {marker} </dev/null >/dev/null 2>&1 & echo up; exec sleep 60"],
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        await contract._read_until(process.stdout, b"up\n")
        survivors = await contract._find_processes([marker])
        process.kill()  # the leader only
        await process.wait()
        assert not await contract._all_gone(survivors, within=0.5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.aclose()
