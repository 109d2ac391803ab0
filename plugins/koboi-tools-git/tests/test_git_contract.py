"""Every git tool passes the tool contract, run for real on a fresh repository."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koboi.sandbox import PassthroughSandbox
from koboi.tools import Risk, Tool, ToolContext
from koboi_testing.contracts import ToolContract
from koboi_tools_git.tools import GitCommit, GitDiff, GitLog, GitStatus


class _InARepository(ToolContract):
    @pytest.fixture
    def tool_context(self, repo: Path) -> ToolContext:
        # A change to commit or diff, so that the contract's real calls succeed.
        (repo / "a.txt").write_text("alpha, changed\n")
        return ToolContext(
            session_id="contract-session",
            call_id="contract-call-1",
            step=1,
            sandbox=PassthroughSandbox(workdir=repo),
            workdir=repo,
        )


class TestGitStatusContract(_InARepository):
    @pytest.fixture
    def tool(self) -> Tool:
        return GitStatus()

    @pytest.fixture
    def valid_arguments(self) -> dict[str, Any]:
        return {}

    @pytest.fixture
    def invalid_arguments(self) -> list[dict[str, Any]]:
        return [{"paths": ["a.txt"]}, {"porcelain": True}]


class TestGitDiffContract(_InARepository):
    @pytest.fixture
    def tool(self) -> Tool:
        return GitDiff()

    @pytest.fixture
    def valid_arguments(self) -> dict[str, Any]:
        return {"staged": False, "paths": ["a.txt"], "context_lines": 1}

    @pytest.fixture
    def invalid_arguments(self) -> list[dict[str, Any]]:
        return [
            {"context_lines": -1},
            {"context_lines": 101},
            {"paths": "a.txt"},
            {"paths": [""]},
            {"paths": [1]},
            {"paths": ["x"] * 101},
            {"staged": "maybe"},
        ]


class TestGitLogContract(_InARepository):
    @pytest.fixture
    def tool(self) -> Tool:
        return GitLog()

    @pytest.fixture
    def valid_arguments(self) -> dict[str, Any]:
        return {"max_count": 5, "paths": []}

    @pytest.fixture
    def invalid_arguments(self) -> list[dict[str, Any]]:
        return [{"max_count": 0}, {"max_count": 10_000}, {"format": "%H"}, {"paths": [None]}]


class TestGitCommitContract(_InARepository):
    @pytest.fixture
    def tool(self) -> Tool:
        return GitCommit()

    @pytest.fixture
    def valid_arguments(self) -> dict[str, Any]:
        return {"message": "Change a", "all": True}

    @pytest.fixture
    def invalid_arguments(self) -> list[dict[str, Any]]:
        return [
            {"message": ""},
            {"message": "  \n "},
            {"message": "x\0y"},
            {"message": "x" * 20_001},
            {"message": "x", "paths": "a.txt"},
            {"message": "x", "all": "everything"},
            {"message": "x", "amend": True},
        ]


def test_risk_and_idempotency_are_chosen_per_tool() -> None:
    reads = [GitStatus(), GitDiff(), GitLog()]
    assert all(t.risk is Risk.SAFE and t.idempotent for t in reads)
    commit = GitCommit()
    assert commit.risk is Risk.MODERATE and not commit.idempotent
