"""koboi: a framework for AI agents you can leave running unattended.

The kernel: hook specs, contracts (provider, tool, sandbox, store, approver),
config, the journaled agent loop and the :class:`KoboiAgent` facade. Every
capability comes from a plugin found through the ``koboi.plugins`` entry points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koboi._version import __version__

if TYPE_CHECKING:
    from koboi.agent import KoboiAgent
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
        PluginError,
        ProviderError,
        SandboxError,
        SessionNotFound,
        StoreError,
        ToolArgumentError,
        ToolError,
    )
    from koboi.events import (
        AgentEvent,
        FinalEvent,
        RunResult,
        StepEvent,
        TextDeltaEvent,
        ToolCallEvent,
        ToolResultEvent,
    )
    from koboi.hookspecs import hookimpl
    from koboi.interceptors import Interceptor, PendingToolCall, RunInfo, Verdict
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
    from koboi.sandbox import PassthroughSandbox, ProcessResult, Sandbox
    from koboi.store import (
        AuditEntry,
        InMemoryStore,
        JournalEvent,
        Lease,
        NewEvent,
        SessionInfo,
        Store,
    )
    from koboi.tools import FunctionTool, Risk, Tool, ToolContext, ToolResult, tool

# Names are imported on first use, so that `import koboi.plugins` (what the CLI
# and every plugin.py need) does not build the loop's and config's models.
_LAZY: dict[str, str] = {
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
    "ConfigError",
    "ConfigProblem",
    "DenyAllApprover",
    "FencedOut",
    "FinalEvent",
    "FunctionTool",
    "InMemoryStore",
    "Interceptor",
    "Job",
    "JournalEvent",
    "KoboiAgent",
    "KoboiError",
    "Lease",
    "LeaseHeld",
    "Message",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "NewEvent",
    "PassthroughSandbox",
    "PendingToolCall",
    "PluginError",
    "PluginHost",
    "ProcessResult",
    "ProviderError",
    "ResponseDone",
    "Risk",
    "RunInfo",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "SessionInfo",
    "SessionNotFound",
    "StepEvent",
    "Store",
    "StoreError",
    "TextDelta",
    "TextDeltaEvent",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolCallEvent",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "ToolResultEvent",
    "ToolSpec",
    "Usage",
    "Verdict",
    "__version__",
    "hookimpl",
    "load_config",
    "tool",
    "validate_config",
]
