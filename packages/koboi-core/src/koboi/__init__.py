"""koboi: a framework for AI agents you can leave running unattended.

The kernel: hook specs, contracts (provider, tool, sandbox, store, approver),
config, the journaled agent loop and the :class:`KoboiAgent` facade. Every
capability comes from a plugin found through the ``koboi.plugins`` entry points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koboi._version import __version__

if TYPE_CHECKING:
    from koboi.agent import KoboiAgent, ToolCallResult
    from koboi.approval import (
        AllowAllApprover,
        ApprovalDecision,
        ApprovalRequest,
        Approver,
        CallbackApprover,
        DenyAllApprover,
    )
    from koboi.config import AgentConfig, load_config, validate_config
    from koboi.errors import (
        ConfigError,
        ConfigProblem,
        FencedOut,
        KoboiError,
        LeaseHeld,
        MissingCapability,
        PluginError,
        ProviderError,
        SandboxError,
        SessionNotFound,
        StoreError,
        Suspend,
        ToolArgumentError,
        ToolError,
    )
    from koboi.events import (
        AgentEvent,
        ChildEvent,
        FinalEvent,
        PluginEvent,
        RunResult,
        StepEvent,
        TextDeltaEvent,
        ToolCallEvent,
        ToolResultEvent,
    )
    from koboi.hookspecs import hookimpl
    from koboi.interceptors import (
        FinishDecision,
        Interceptor,
        PendingToolCall,
        Refusal,
        RunInfo,
        Verdict,
    )
    from koboi.messages import (
        Message,
        ModelRequest,
        ModelResponse,
        ResponseDone,
        TextDelta,
        ToolCall,
        ToolSpec,
        Usage,
    )
    from koboi.plugins import PluginHost
    from koboi.provider import ModelProvider
    from koboi.runners import RunHandle, Runner
    from koboi.sandbox import PassthroughSandbox, ProcessResult, Sandbox, SandboxProcess
    from koboi.sidecalls import RunModel
    from koboi.store import (
        AuditEntry,
        InMemoryStore,
        Job,
        JobQueue,
        JournalEvent,
        KeyedRecords,
        Lease,
        NewEvent,
        ResponseCache,
        SessionInfo,
        Store,
        cache_of,
        capability,
        jobs_of,
        records_of,
    )
    from koboi.tools import FunctionTool, Risk, Tool, ToolContext, ToolResult, tool
    from koboi.toolsets import Toolset, ToolsetContext
    from koboi.tracing import TraceContext

# Names are imported on first use, so that `import koboi.plugins` (what the CLI
# and every plugin.py need) does not build the loop's and config's models.
_LAZY: dict[str, str] = {
    "RunModel": "koboi.sidecalls",
    "SandboxProcess": "koboi.sandbox",
    "capability": "koboi.store",
    "records_of": "koboi.store",
    "jobs_of": "koboi.store",
    "cache_of": "koboi.store",
    "ResponseCache": "koboi.store",
    "JobQueue": "koboi.store",
    "KeyedRecords": "koboi.store",
    "ToolsetContext": "koboi.toolsets",
    "ToolCallResult": "koboi.agent",
    "TraceContext": "koboi.tracing",
    "MissingCapability": "koboi.errors",
    "Suspend": "koboi.errors",
    "RunHandle": "koboi.runners",
    "Runner": "koboi.runners",
    "Toolset": "koboi.toolsets",
    "FinishDecision": "koboi.interceptors",
    "Refusal": "koboi.interceptors",
    "PluginEvent": "koboi.events",
    "ChildEvent": "koboi.events",
    "AgentConfig": "koboi.config",
    "AgentEvent": "koboi.events",
    "AllowAllApprover": "koboi.approval",
    "ApprovalDecision": "koboi.approval",
    "ApprovalRequest": "koboi.approval",
    "Approver": "koboi.approval",
    "CallbackApprover": "koboi.approval",
    "ConfigError": "koboi.errors",
    "ConfigProblem": "koboi.errors",
    "DenyAllApprover": "koboi.approval",
    "FinalEvent": "koboi.events",
    "FunctionTool": "koboi.tools",
    "FencedOut": "koboi.errors",
    "InMemoryStore": "koboi.store",
    "AuditEntry": "koboi.store",
    "Job": "koboi.store",
    "Lease": "koboi.store",
    "LeaseHeld": "koboi.errors",
    "Interceptor": "koboi.interceptors",
    "JournalEvent": "koboi.store",
    "KoboiAgent": "koboi.agent",
    "KoboiError": "koboi.errors",
    "Message": "koboi.messages",
    "ModelProvider": "koboi.provider",
    "ModelRequest": "koboi.messages",
    "ModelResponse": "koboi.messages",
    "NewEvent": "koboi.store",
    "PassthroughSandbox": "koboi.sandbox",
    "PendingToolCall": "koboi.interceptors",
    "PluginError": "koboi.errors",
    "PluginHost": "koboi.plugins",
    "ProcessResult": "koboi.sandbox",
    "ProviderError": "koboi.errors",
    "ResponseDone": "koboi.messages",
    "Risk": "koboi.tools",
    "RunInfo": "koboi.interceptors",
    "RunResult": "koboi.events",
    "Sandbox": "koboi.sandbox",
    "SandboxError": "koboi.errors",
    "SessionInfo": "koboi.store",
    "SessionNotFound": "koboi.errors",
    "StepEvent": "koboi.events",
    "Store": "koboi.store",
    "StoreError": "koboi.errors",
    "TextDelta": "koboi.messages",
    "TextDeltaEvent": "koboi.events",
    "Tool": "koboi.tools",
    "ToolArgumentError": "koboi.errors",
    "ToolCall": "koboi.messages",
    "ToolCallEvent": "koboi.events",
    "ToolContext": "koboi.tools",
    "ToolError": "koboi.errors",
    "ToolResult": "koboi.tools",
    "ToolResultEvent": "koboi.events",
    "ToolSpec": "koboi.messages",
    "Usage": "koboi.messages",
    "Verdict": "koboi.interceptors",
    "hookimpl": "koboi.hookspecs",
    "load_config": "koboi.config",
    "tool": "koboi.tools",
    "validate_config": "koboi.config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'koboi' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AgentConfig",
    "AgentEvent",
    "AllowAllApprover",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "AuditEntry",
    "CallbackApprover",
    "ChildEvent",
    "ConfigError",
    "ConfigProblem",
    "DenyAllApprover",
    "FencedOut",
    "FinalEvent",
    "FinishDecision",
    "FunctionTool",
    "InMemoryStore",
    "Interceptor",
    "Job",
    "JobQueue",
    "JournalEvent",
    "KeyedRecords",
    "KoboiAgent",
    "KoboiError",
    "Lease",
    "LeaseHeld",
    "Message",
    "MissingCapability",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "NewEvent",
    "PassthroughSandbox",
    "PendingToolCall",
    "PluginError",
    "PluginEvent",
    "PluginHost",
    "ProcessResult",
    "ProviderError",
    "Refusal",
    "ResponseCache",
    "ResponseDone",
    "Risk",
    "RunHandle",
    "RunInfo",
    "RunModel",
    "RunResult",
    "Runner",
    "Sandbox",
    "SandboxError",
    "SandboxProcess",
    "SessionInfo",
    "SessionNotFound",
    "StepEvent",
    "Store",
    "StoreError",
    "Suspend",
    "TextDelta",
    "TextDeltaEvent",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolCallEvent",
    "ToolCallResult",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolResultEvent",
    "ToolSpec",
    "Toolset",
    "ToolsetContext",
    "TraceContext",
    "Usage",
    "Verdict",
    "__version__",
    "cache_of",
    "capability",
    "hookimpl",
    "jobs_of",
    "load_config",
    "records_of",
    "tool",
    "validate_config",
]
