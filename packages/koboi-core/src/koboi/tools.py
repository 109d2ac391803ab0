"""The ``Tool`` contract and the ``@tool`` decorator.

A tool has a name, a description, a pydantic model of its arguments (from
which its JSON schema is generated), a risk level and an ``idempotent`` flag.
Tools may be sync or async; they receive a :class:`ToolContext` when they ask
for one by annotation.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    NoReturn,
    TypeVar,
    Unpack,
    cast,
    get_type_hints,
    overload,
)

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from koboi.errors import Suspend, ToolArgumentError, ToolError
from koboi.messages import ToolSpec

if TYPE_CHECKING:
    from koboi.events import RunResult
    from koboi.interceptors import RunInfo
    from koboi.sandbox import ProcessResult, Sandbox, SandboxProcess
    from koboi.sidecalls import RunModel
    from koboi.subagents import ChildOptions

_NAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_.-]{0,63}$")


class Risk(StrEnum):
    """How much harm a tool call can do. Governance uses it to decide approvals."""

    SAFE = "safe"
    MODERATE = "moderate"
    DESTRUCTIVE = "destructive"


@dataclass
class ToolResult:
    """The outcome of a tool call, as the model will see it."""

    content: str
    is_error: bool = False
    data: Any = None


@dataclass
class ToolContext:
    """What the kernel hands a tool that asks for it (annotate a parameter ``ToolContext``).

    ``resources`` carries dependencies registered by the application or by
    plugins, looked up by type with :meth:`get`.
    """

    session_id: str
    call_id: str
    step: int
    sandbox: Sandbox
    workdir: Path | None = None
    resources: Mapping[type[Any], Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    #: Set by the loop: runs a child agent under this run's governance.
    subagent_runner: Callable[..., Awaitable[RunResult]] | None = field(default=None, repr=False)
    #: The run the call belongs to (None for a tool run outside a loop).
    run: RunInfo | None = field(default=None, repr=False)
    #: The reply a suspended run was continued with, when this call suspended it.
    reply: Any = None
    #: Set by the loop: streams a plugin event tagged with this call.
    emitter: Callable[[str, Mapping[str, Any]], None] | None = field(default=None, repr=False)

    def record(self, event_type: str, data: Mapping[str, Any]) -> int:
        """Journal a plugin event ``"<plugin id>.<name>"`` (see :meth:`RunInfo.record`)."""
        if self.run is None:
            raise ToolError("plugin events need a run (the tool runs outside a loop)")
        return self.run.record(event_type, data)

    def emit(self, event_type: str, data: Mapping[str, Any]) -> None:
        """Stream progress (a plugin event, not journaled) tagged with this call; the
        tool should set ``live_events = True`` so it reaches the stream as it happens."""
        if self.emitter is not None:
            self.emitter(event_type, data)

    @property
    def model(self) -> RunModel:
        """The run's model for side calls (see :class:`koboi.sidecalls.RunModel`)."""
        if self.run is None:
            raise ToolError("side model calls need a run (the tool runs outside a loop)")
        return self.run.model

    def suspend(
        self, reason: str, *, kind: str = "input", data: Mapping[str, Any] | None = None
    ) -> NoReturn:
        """End the run *suspended* until someone answers (see :class:`koboi.errors.Suspend`).

        Call it before doing anything the call would not do again: the call runs again,
        with the answer in :attr:`reply`, when the run is continued.
        """
        raise Suspend(reason, kind=kind, data=dict(data or {}))

    async def run_subagent(self, message: str, **options: Unpack[ChildOptions]) -> RunResult:
        """Run a child agent to completion and return its result.

        The child inherits this run's whole pipeline — mode, approver, interceptors
        (policy, guardrails, trust, rate limits), sandbox, store and journal — and
        may only use a subset of this run's tools (``tools``, default all). It runs
        in a session of its own whose metadata names the parent session, and its
        usage counts against this run's budgets. The other ``options``
        (:class:`koboi.subagents.ChildOptions`: ``session_id``, ``model``, ``mode``, the
        limits) are as for :meth:`koboi.runners.RunHandle.child`.
        """
        if self.subagent_runner is None:
            raise ToolError("sub-agents are not available here (the tool runs outside a loop)")
        return await self.subagent_runner(message, parent_call_id=self.call_id, **options)

    async def run_process(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: bytes | None = None,
        max_output: int = 1_000_000,
    ) -> ProcessResult:
        """Run a command through this call's sandbox, as this session, in its workdir.

        What a tool that starts processes should use: the sandbox applies its
        confinement, and ``cwd`` defaults to the session's working directory.
        """
        return await self.sandbox.run_process(
            argv,
            cwd=cwd if cwd is not None else self.workdir,
            env=env,
            timeout=timeout,
            input=input,
            max_output=max_output,
            session_id=self.session_id,
        )

    def open_process(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        stderr: Literal["pipe", "stdout", "discard"] = "pipe",
    ) -> SandboxProcess:
        """Start a long-lived process through this call's sandbox, as this session
        (``async with ctx.open_process([...]) as process: ...``); see
        :meth:`koboi.Sandbox.open_process`."""
        return self.sandbox.open_process(
            argv,
            cwd=cwd if cwd is not None else self.workdir,
            env=env,
            stderr=stderr,
            session_id=self.session_id,
        )

    def get(self, kind: type[T]) -> T:
        """Return the resource registered for ``kind``; ``LookupError`` names what is missing."""
        try:
            return cast(T, self.resources[kind])
        except KeyError:
            raise LookupError(
                f"no resource of type {kind.__qualname__} was provided to this agent"
            ) from None


T = TypeVar("T")


def validate_tool_name(name: str) -> str:
    """Return ``name`` if it is a valid tool name, else raise ``ValueError`` saying why."""
    if not _NAME_RE.match(name):
        raise ValueError(
            f"invalid tool name {name!r}: use 1-64 ASCII letters, digits, '_', '.' or '-', "
            "starting with a letter"
        )
    return name


class Tool(ABC):
    """Base class of every tool.

    Subclasses set the class attributes and implement :meth:`invoke`::

        class Echo(Tool):
            name = "echo"
            description = "Repeat the text."
            args_model = EchoArgs
            risk = Risk.SAFE
            idempotent = True

            async def invoke(self, args: EchoArgs, ctx: ToolContext) -> str:
                return args.text
    """

    name: str
    description: str
    args_model: type[BaseModel]
    risk: Risk = Risk.SAFE
    idempotent: bool = False
    #: Only records the agent's own plan or notes (a todo list...): allowed in plan mode.
    planning: bool = False
    #: Its calls report progress or run sub-agents (``ctx.emit``, ``ctx.run_subagent``):
    #: the loop runs each call in a task of its own so those events reach the stream as
    #: they happen (other calls are awaited directly; what they emit follows their result).
    live_events: bool = False
    #: For a toolset's tool: the namespace it is offered under (``<namespace>__<name>``)
    #: instead of its toolset's, for a toolset that gathers several sources (an MCP
    #: client's servers). None: the toolset's. Ignored for tools outside toolsets.
    namespace: str | None = None

    _spec: ToolSpec | None = None

    def spec(self) -> ToolSpec:
        """What the model is told about this tool (cached)."""
        if self._spec is None:
            schema = self.args_model.model_json_schema()
            schema.pop("title", None)
            self._spec = ToolSpec(name=self.name, description=self.description, parameters=schema)
        return self._spec

    def parse_arguments(self, arguments: Mapping[str, Any]) -> BaseModel:
        """Validate the model's arguments; a :class:`ToolArgumentError` says what to fix."""
        try:
            return self.args_model.model_validate(dict(arguments))
        except ValidationError as exc:
            raise ToolArgumentError(describe_validation_error(self.name, exc)) from None

    @abstractmethod
    def invoke(self, args: Any, ctx: ToolContext) -> Awaitable[Any] | Any:
        """Run the tool. May be sync or async; may return str, ToolResult or JSON-able data."""

    async def __call__(self, args: BaseModel, ctx: ToolContext) -> ToolResult:
        """Invoke and normalise the return value to a :class:`ToolResult`."""
        value = self.invoke(args, ctx)
        if inspect.isawaitable(value):
            value = await value
        return to_tool_result(value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} risk={self.risk.value}>"


def to_tool_result(value: Any) -> ToolResult:
    """Turn what a tool returned into the text the model will read."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(content=value)
    if isinstance(value, BaseModel):
        return ToolResult(content=value.model_dump_json(), data=value)
    if value is None:
        return ToolResult(content="")
    try:
        return ToolResult(content=json.dumps(value, ensure_ascii=False, default=str), data=value)
    except (TypeError, ValueError):
        return ToolResult(content=str(value), data=value)


def describe_validation_error(tool_name: str, exc: ValidationError) -> str:
    """One readable line per problem, phrased for a model that must fix its call."""
    parts: list[str] = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(x) for x in err["loc"]) or "<arguments>"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown argument '{loc}'")
        elif err["type"] == "missing":
            parts.append(f"missing required argument '{loc}'")
        else:
            got = err.get("input")
            shown = json.dumps(got, default=str)[:80] if got is not None else "null"
            parts.append(f"argument '{loc}': {err['msg']} (got {shown})")
    return f"invalid arguments for tool '{tool_name}': " + "; ".join(parts)


class FunctionTool(Tool):
    """A tool made from a typed Python function by :func:`tool`."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        risk: Risk | str = Risk.SAFE,
        idempotent: bool = False,
        thread: bool = True,
    ) -> None:
        self.func = func
        self.name = validate_tool_name(name or func.__name__)
        doc = inspect.getdoc(func) or ""
        summary, param_docs = _parse_docstring(doc)
        self.description = description or summary or self.name
        self.risk = Risk(risk)
        self.idempotent = idempotent
        self._is_async = inspect.iscoroutinefunction(func)
        self._thread = thread
        self._context_param: str | None = None
        self.args_model = self._build_model(func, param_docs)

    def _build_model(self, func: Callable[..., Any], param_docs: dict[str, str]) -> type[BaseModel]:
        hints = get_type_hints(func, include_extras=True)
        fields: dict[str, Any] = {}
        for pname, param in inspect.signature(func).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {self.name!r}: *args/**kwargs are not supported")
            annotation = hints.get(pname, Any)
            if annotation is ToolContext:
                self._context_param = pname
                continue
            default = ... if param.default is param.empty else param.default
            doc = param_docs.get(pname)
            fields[pname] = (annotation, Field(default, description=doc) if doc else default)
        model_name = "".join(p.capitalize() for p in re.split(r"[_.-]", self.name)) + "Args"
        return create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)

    async def invoke(self, args: BaseModel, ctx: ToolContext) -> Any:
        kwargs = {k: getattr(args, k) for k in type(args).model_fields}
        if self._context_param is not None:
            kwargs[self._context_param] = ctx
        if self._is_async:
            return await self.func(**kwargs)
        if self._thread:
            return await anyio.to_thread.run_sync(lambda: self.func(**kwargs))
        return self.func(**kwargs)


F = TypeVar("F", bound=Callable[..., Any])


@overload
def tool(func: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    risk: Risk | str = Risk.SAFE,
    idempotent: bool = False,
    thread: bool = True,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    risk: Risk | str = Risk.SAFE,
    idempotent: bool = False,
    thread: bool = True,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a typed function into a :class:`Tool`.

    The argument model is built from the signature (annotations, defaults and the
    ``Args:`` section of the docstring for descriptions); unknown arguments are
    refused. A parameter annotated :class:`ToolContext` is injected, not exposed.
    Sync functions run in a worker thread unless ``thread=False`` (for cheap,
    pure functions).
    """

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f, name=name, description=description, risk=risk, idempotent=idempotent, thread=thread
        )

    if func is not None:
        return wrap(func)
    return wrap


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its summary and the descriptions of an ``Args:`` section."""
    if not doc:
        return "", {}
    lines = doc.splitlines()
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped.lower() in ("args:", "arguments:", "parameters:"):
            in_args = True
            continue
        if in_args:
            match = re.match(r"^(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", stripped)
            if match and line.startswith((" ", "\t")):
                current = match.group(1)
                params[current] = match.group(3)
            elif stripped and current and line.startswith((" ", "\t")):
                params[current] += " " + stripped
            elif stripped.endswith(":") and not line.startswith((" ", "\t")):
                in_args = False
        elif not params:
            summary_lines.append(line)
    summary = "\n".join(summary_lines).strip()
    return summary, params
