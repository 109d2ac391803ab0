"""calculator and current_time pass the tool contract every tool plugin must pass."""

from __future__ import annotations

from typing import Any

import pytest

from koboi.tools import Tool
from koboi_testing.contracts import ToolContract
from koboi_tools_basic.tools import calculator, current_time


class TestCalculatorContract(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return calculator

    @pytest.fixture
    def valid_arguments(self) -> dict[str, Any]:
        return {"expression": "6 * 7"}

    @pytest.fixture
    def invalid_arguments(self) -> list[dict[str, Any]]:
        return [{}, {"expression": 42}, {"expression": "1", "mode": "x"}]


class TestCurrentTimeContract(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return current_time

    @pytest.fixture
    def valid_arguments(self) -> dict[str, Any]:
        return {"timezone": "Europe/Paris"}

    @pytest.fixture
    def invalid_arguments(self) -> list[dict[str, Any]]:
        return [{"timezone": 3}, {"zone": "UTC"}]
