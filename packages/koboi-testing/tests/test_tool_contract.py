"""The tool contract, run against tools made with ``koboi.tools.tool`` and a Tool subclass."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from koboi.tools import FunctionTool, Risk, Tool, ToolContext, ToolResult, tool
from koboi_testing.contracts import ToolContract


@tool(risk="moderate")
async def write_note(title: str, body: str, ctx: ToolContext, tags: list[str] | None = None) -> str:
    """Write a note into the working directory.

    Args:
        title: File name of the note, without extension.
        body: Text of the note.
        tags: Optional labels.
    """
    assert ctx.workdir is not None
    path = ctx.workdir / f"{title}.txt"
    path.write_text(body)
    return f"wrote {len(body)} characters to {path.name} (tags: {tags or []})"


@tool(idempotent=True)
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


class TestAsyncFunctionTool(ToolContract):
    @pytest.fixture
    def tool(self) -> FunctionTool:
        return write_note

    @pytest.fixture
    def valid_arguments(self) -> dict[str, Any]:
        return {"title": "hello", "body": "Hello, wörld", "tags": ["x"]}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"title": 3, "body": "x"}, {"title": "t", "body": "x", "tags": "not-a-list"}]

    def test_context_parameter_is_hidden_from_the_model(self, tool: FunctionTool) -> None:
        assert "ctx" not in tool.spec().parameters["properties"]
        assert tool.risk is Risk.MODERATE

    @pytest.mark.anyio
    async def test_the_tool_ran_in_the_workdir(
        self, tool: FunctionTool, valid_arguments: dict[str, Any], tool_context: ToolContext
    ) -> None:
        result = await tool(tool.parse_arguments(valid_arguments), tool_context)
        assert result.content.startswith("wrote 12 characters to hello.txt")
        assert tool_context.workdir is not None
        assert (tool_context.workdir / "hello.txt").read_text() == "Hello, wörld"


class TestSyncFunctionTool(ToolContract):
    @pytest.fixture
    def tool(self) -> FunctionTool:
        return add

    @pytest.fixture
    def valid_arguments(self) -> dict[str, Any]:
        return {"a": 2, "b": 3}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"a": "two"}, {"a": 1.5}, {"a": None}]

    @pytest.mark.anyio
    async def test_non_string_result_becomes_json_text(
        self, tool: FunctionTool, koboi_tool_context: ToolContext
    ) -> None:
        result = await tool(tool.parse_arguments({"a": 40, "b": 2}), koboi_tool_context)
        assert result == ToolResult(content="42", data=42)


class ShoutArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, description="What to shout.")


class Shout(Tool):
    name = "text.shout"
    description = "Upper-case the text."
    args_model = ShoutArgs
    risk = Risk.SAFE
    idempotent = True

    def invoke(self, args: ShoutArgs, ctx: ToolContext) -> ToolResult:
        return ToolResult(content=args.text.upper())


class TestToolSubclass(ToolContract):
    @pytest.fixture
    def tool(self) -> Tool:
        return Shout()

    @pytest.fixture
    def valid_arguments(self) -> dict[str, Any]:
        return {"text": "hey"}

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return [{"text": ""}, {"text": ["hey"]}]
