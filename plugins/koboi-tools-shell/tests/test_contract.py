"""run_shell, shell_status and shell_kill pass the tool contract every tool plugin must pass."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from koboi.tools import Tool, ToolContext
from koboi_testing.contracts import ToolContract
from koboi_tools_shell.jobs import JobRegistry
from koboi_tools_shell.settings import MAX_COMMAND_CHARS
from koboi_tools_shell.tools import RunShell, ShellKill, ShellStatus


@pytest.fixture
def contract_registry() -> Iterator[JobRegistry]:
    jobs = JobRegistry()
    yield jobs
    jobs.shutdown()


@pytest.fixture
def running_job(contract_registry: JobRegistry, tool_context: ToolContext) -> str:
    """A real job of the contract's session, so status and kill have something to act on."""

    async def start() -> str:
        result = await RunShell(registry=contract_registry).invoke(
            RunShell.args_model(command="echo contract; sleep 30", background=True), tool_context
        )
        return str(result.data["job_id"])

    return anyio.run(start)


class TestRunShellContract(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return RunShell()

    @pytest.fixture
    def valid_arguments(self) -> dict[str, Any]:
        return {"command": "echo hello", "timeout_seconds": 10, "cwd": "."}

    @pytest.fixture
    def invalid_arguments(self) -> list[dict[str, Any]]:
        return [
            {"command": 42},
            {"command": ""},
            {"command": "   "},
            {"command": "a\0b"},
            {"command": "x" * (MAX_COMMAND_CHARS + 1)},
            {"command": "ls", "timeout_seconds": 0},
            {"command": "ls", "timeout_seconds": -5},
            {"command": "ls", "timeout_seconds": "soon"},
            {"command": "ls", "cwd": 7},
            {"command": "ls", "background": "maybe"},
        ]


class TestShellStatusContract(ToolContract):
    @pytest.fixture
    def tool(self, contract_registry: JobRegistry) -> Tool:
        return ShellStatus(contract_registry)

    @pytest.fixture
    def valid_arguments(self, running_job: str) -> dict[str, Any]:
        return {"job_id": running_job}

    @pytest.fixture
    def invalid_arguments(self) -> list[dict[str, Any]]:
        return [{"job_id": ""}, {"job_id": 3}, {"job_id": "x" * 65}, {"id": "job-1"}]


class TestShellKillContract(ToolContract):
    @pytest.fixture
    def tool(self, contract_registry: JobRegistry) -> Tool:
        return ShellKill(contract_registry)

    @pytest.fixture
    def valid_arguments(self, running_job: str) -> dict[str, Any]:
        return {"job_id": running_job}

    @pytest.fixture
    def invalid_arguments(self) -> list[dict[str, Any]]:
        return [{"job_id": ""}, {"job_id": None}, {"job_id": "x" * 65}]
