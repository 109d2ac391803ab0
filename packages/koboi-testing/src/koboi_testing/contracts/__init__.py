"""Contract suites: subclass one in your tests and provide its fixtures.

Each suite is a plain class (not collected by itself because its name does
not start with ``Test``); a ``Test...`` subclass in your test module runs it
against your implementation. See each class's docstring for the fixtures it
needs.
"""

from __future__ import annotations

from koboi_testing.contracts.approval import ApproverContract, sample_request
from koboi_testing.contracts.provider import (
    HELLO_TEXT,
    LENGTH_TEXT,
    PARIS,
    SCENARIOS,
    TOKYO,
    USAGE_INPUT_TOKENS,
    USAGE_OUTPUT_TOKENS,
    WEATHER_TOOL,
    ProviderContract,
    ProviderFactory,
    Scenario,
    scenario_request,
)
from koboi_testing.contracts.runner import RunnerContract
from koboi_testing.contracts.sandbox import SandboxContract
from koboi_testing.contracts.store import (
    JobQueueContract,
    JournalStoreContract,
    KeyedRecordsContract,
    ResponseCacheContract,
    StoreContract,
)
from koboi_testing.contracts.tool import ToolContract
from koboi_testing.contracts.toolset import ToolsetContract, toolset_context

__all__ = [
    "HELLO_TEXT",
    "LENGTH_TEXT",
    "PARIS",
    "SCENARIOS",
    "TOKYO",
    "USAGE_INPUT_TOKENS",
    "USAGE_OUTPUT_TOKENS",
    "WEATHER_TOOL",
    "ApproverContract",
    "JobQueueContract",
    "JournalStoreContract",
    "KeyedRecordsContract",
    "ProviderContract",
    "ProviderFactory",
    "ResponseCacheContract",
    "RunnerContract",
    "SandboxContract",
    "Scenario",
    "StoreContract",
    "ToolContract",
    "ToolsetContract",
    "sample_request",
    "scenario_request",
    "toolset_context",
]
