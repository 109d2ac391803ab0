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
