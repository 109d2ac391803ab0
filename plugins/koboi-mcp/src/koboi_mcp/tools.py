"""An MCP server's tools as koboi tools.

Each remote tool becomes a :class:`McpTool` offered as ``<namespace>__<tool>`` (made safe
for every model API), offered with the server's own input schema, with a risk
read from its annotations (``readOnlyHint`` → safe, ``destructiveHint`` →
destructive, otherwise moderate; the config may say otherwise per tool) and
``idempotent`` from ``idempotentHint``. The server validates the arguments it
receives (as MCP servers must): koboi checks only that they are a JSON object,
so a refusal is the server's answer, journaled as any result.

Resources and prompts are reached through four more tools per server
(``list_resources``, ``read_resource``, ``list_prompts``, ``get_prompt``), all
safe and idempotent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import mcp_types as types
from pydantic import BaseModel, ConfigDict

from koboi.messages import ToolSpec
from koboi.tools import Risk, Tool, ToolContext, ToolResult
from koboi_confine.text import neutralise

if TYPE_CHECKING:
    from koboi_mcp.connection import ServerConnection


class AnyArguments(BaseModel):
    """The arguments of an MCP tool: any JSON object (the server checks them)."""

    model_config = ConfigDict(extra="allow")


def risk_of(tool: types.Tool, overrides: Mapping[str, Risk]) -> Risk:
    """The config's risk for the tool, else what its annotations say."""
    if tool.name in overrides:
        return Risk(overrides[tool.name])
    hints = tool.annotations
    if hints is not None:
        if hints.read_only_hint:
            return Risk.SAFE
        if hints.destructive_hint:
            return Risk.DESTRUCTIVE
    return Risk.MODERATE


def idempotent_of(tool: types.Tool, overrides: Mapping[str, bool]) -> bool:
    """The config's answer, else ``idempotentHint`` (a read-only tool is idempotent too)."""
    if tool.name in overrides:
        return bool(overrides[tool.name])
    hints = tool.annotations
    if hints is None:
        return False
    return bool(hints.idempotent_hint or hints.read_only_hint)


def content_text(blocks: Sequence[Any], structured: Any = None) -> str:
    """What the model reads of a result's content blocks.

    Text as it is; an image, audio or binary resource as one line saying what it is
    (models that read images get them through other tools); structured content as
    JSON when the server sent no text.
    """
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            size = _decoded_size(block.data)
            parts.append(f"[{block.type}: {block.mime_type}, {size} bytes]")
        elif isinstance(block, types.EmbeddedResource):
            parts.append(_resource_text(block.resource))
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link: {block.uri} ({block.name})]")
        else:  # a block type of a later revision
            parts.append(json.dumps(_dump(block), ensure_ascii=False))
    if structured is not None and not any(parts):
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    # A server's text reaches a model and people: no escape sequences, no controls.
    return neutralise("\n".join(parts))


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except ValueError:
        return len(data)


def _resource_text(resource: types.TextResourceContents | types.BlobResourceContents) -> str:
    if isinstance(resource, types.TextResourceContents):
        return f"[resource {resource.uri}]\n{resource.text}"
    mime = resource.mime_type or "application/octet-stream"
    return f"[resource {resource.uri}: {mime}, {_decoded_size(resource.blob)} bytes]"


class McpTool(Tool):
    """One tool of an MCP server, called through its connection."""

    args_model = AnyArguments
    #: Progress and log notifications stream while the call runs.
    live_events = True

    def __init__(
        self,
        connection: ServerConnection,
        remote: types.Tool,
        *,
        namespace: str,
        risk: Risk,
        idempotent: bool,
    ) -> None:
        self.connection = connection
        self.remote = remote
        self.remote_name = remote.name
        # Offered as <namespace>__<name>, made safe for model APIs, by the kernel.
        self.name = remote.name
        self.namespace = namespace
        title = remote.title or (remote.annotations.title if remote.annotations else None)
        description = remote.description or title or remote.name
        self.description = f"{description} (MCP server {connection.name!r})"
        self.risk = risk
        self.idempotent = idempotent
        schema = dict(remote.input_schema or {"type": "object"})
        self._spec = ToolSpec(name=self.name, description=self.description, parameters=schema)

    def spec(self) -> ToolSpec:
        assert self._spec is not None
        return self._spec

    async def invoke(self, args: AnyArguments, ctx: ToolContext) -> ToolResult:
        arguments = dict(args.model_extra or {})
        result = await self.connection.call_tool(self.remote_name, arguments, ctx)
        return ToolResult(
            content_text(result.content, result.structured_content),
            is_error=result.is_error,
            data=result.structured_content,
        )


class _HelperTool(Tool):
    """A safe, idempotent tool a server's resources or prompts are reached through."""

    risk = Risk.SAFE
    idempotent = True

    def __init__(
        self, connection: ServerConnection, namespace: str, name: str, description: str
    ) -> None:
        self.connection = connection
        self.name = name
        self.namespace = namespace
        self.description = f"{description} (MCP server {connection.name!r})"


class _NoArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _ResourceArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    uri: str


class _PromptArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, str] | None = None


class ListResources(_HelperTool):
    args_model = _NoArguments

    async def invoke(self, args: _NoArguments, ctx: ToolContext) -> str:
        resources, templates = await self.connection.list_resources()
        lines = [
            f"{r.uri}  {r.name}"
            + (f" ({r.mime_type})" if r.mime_type else "")
            + (f": {r.description}" if r.description else "")
            for r in resources
        ]
        lines += [
            f"{t.uri_template}  {t.name} (template)"
            + (f": {t.description}" if t.description else "")
            for t in templates
        ]
        return "\n".join(lines) or "no resources"


class ReadResource(_HelperTool):
    args_model = _ResourceArguments

    async def invoke(self, args: _ResourceArguments, ctx: ToolContext) -> str:
        result = await self.connection.read_resource(args.uri)
        return "\n".join(_resource_text(c) for c in result.contents)


class ListPrompts(_HelperTool):
    args_model = _NoArguments

    async def invoke(self, args: _NoArguments, ctx: ToolContext) -> str:
        prompts = await self.connection.list_prompts()
        lines = []
        for prompt in prompts:
            names = ", ".join(
                a.name + ("" if a.required else "?") for a in (prompt.arguments or [])
            )
            lines.append(
                f"{prompt.name}({names})"
                + (f": {prompt.description}" if prompt.description else "")
            )
        return "\n".join(lines) or "no prompts"


class GetPrompt(_HelperTool):
    args_model = _PromptArguments

    async def invoke(self, args: _PromptArguments, ctx: ToolContext) -> str:
        result = await self.connection.get_prompt(args.name, args.arguments)
        lines = [f"{m.role}: {content_text([m.content])}" for m in result.messages]
        return "\n".join(lines)


def helper_tools(
    connection: ServerConnection, namespace: str, capabilities: types.ServerCapabilities | None
) -> list[Tool]:
    """The resource and prompt tools a server's capabilities and its config call for."""
    settings = connection.settings
    made: list[Tool] = []
    if settings.resources and capabilities is not None and capabilities.resources is not None:
        made.append(
            ListResources(
                connection,
                namespace,
                "list_resources",
                "List the server's resources and resource templates.",
            )
        )
        made.append(
            ReadResource(
                connection,
                namespace,
                "read_resource",
                "Read one of the server's resources by its URI.",
            )
        )
    if settings.prompts and capabilities is not None and capabilities.prompts is not None:
        made.append(
            ListPrompts(
                connection,
                namespace,
                "list_prompts",
                "List the server's prompts and their arguments.",
            )
        )
        made.append(
            GetPrompt(
                connection,
                namespace,
                "get_prompt",
                "Get one of the server's prompts, filled in with arguments.",
            )
        )
    return made
