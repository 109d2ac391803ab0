"""koboi: a framework for AI agents you can leave running unattended.

The kernel: hook specs, contracts (provider, tool, sandbox, store, approver),
config, the journaled agent loop and the :class:`KoboiAgent` facade. Every
capability comes from a plugin found through the ``koboi.plugins`` entry points.
"""

from __future__ import annotations

from koboi._version import __version__
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
    KoboiError,
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
from koboi.store import InMemoryStore, JournalEvent, NewEvent, SessionInfo, Store
from koboi.tools import FunctionTool, Risk, Tool, ToolContext, ToolResult, tool

__all__ = [
    "AgentConfig",
    "AgentEvent",
    "AllowAllApprover",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "CallbackApprover",
    "ConfigError",
    "ConfigProblem",
    "DenyAllApprover",
    "FinalEvent",
    "FunctionTool",
    "InMemoryStore",
    "Interceptor",
    "JournalEvent",
    "KoboiAgent",
    "KoboiError",
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
