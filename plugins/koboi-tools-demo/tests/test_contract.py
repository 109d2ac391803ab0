"""append_log passes the tool contract every tool plugin must pass."""

from __future__ import annotations

from typing import Any

import pytest

from koboi.tools import Tool
from koboi_testing.contracts import ToolContract
from koboi_tools_demo.tools import append_log


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "0")


class TestAppendLogContract(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return append_log

    @pytest.fixture
    def valid_arguments(self) -> dict[str, Any]:
        return {"line": "step-1"}

    @pytest.fixture
    def invalid_arguments(self) -> list[dict[str, Any]]:
        return [{}, {"line": 3}, {"line": "x", "path": "/etc/passwd"}]
