"""The @tool decorator and the Tool contract."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from koboi import Risk, Tool, ToolContext, ToolResult, tool
from koboi.errors import ToolArgumentError
from koboi.sandbox import PassthroughSandbox
from koboi.tools import validate_tool_name


def ctx() -> ToolContext:
    return ToolContext(session_id="s", call_id="c", step=1, sandbox=PassthroughSandbox())


def test_schema_from_a_typed_function_with_docstring_args() -> None:
    @tool(risk="moderate", idempotent=True)
    def search(query: str, limit: int = 5, kind: Literal["web", "news"] = "web") -> list[str]:
        """Search the index.

        Args:
            query: What to look for.
            limit: Most results to return.
        """
        return [query] * limit

    spec = search.spec()
    assert spec.name == "search"
    assert spec.description == "Search the index."
    props = spec.parameters["properties"]
    assert props["query"] == {
        "description": "What to look for.",
        "title": "Query",
        "type": "string",
    }
    assert (
        props["limit"]["default"] == 5
        and props["limit"]["description"] == "Most results to return."
    )
    assert props["kind"]["enum"] == ["web", "news"]
    assert spec.parameters["required"] == ["query"]
    assert spec.parameters["additionalProperties"] is False
    assert (search.risk, search.idempotent) == (Risk.MODERATE, True)
    json.dumps(spec.parameters)


def test_annotated_descriptions_and_context_injection() -> None:
    @tool
    async def whoami(
        ctx: ToolContext, greeting: Annotated[str, Field(description="How to greet")]
    ) -> str:
        """Say who is asking."""
        return f"{greeting} from {ctx.session_id}/{ctx.call_id}"

    assert "ctx" not in whoami.spec().parameters["properties"]
    assert whoami.spec().parameters["properties"]["greeting"]["description"] == "How to greet"


@pytest.mark.anyio
async def test_sync_async_and_return_values() -> None:
    @tool
    def sync_tool(x: int) -> dict[str, int]:
        """Double."""
        return {"double": x * 2}

    @tool
    async def async_tool(x: int) -> ToolResult:
        """Half."""
        return ToolResult(str(x / 2), data=x / 2)

    @tool
    def injected(ctx: ToolContext) -> str:
        """Session."""
        return ctx.session_id

    assert (await sync_tool(sync_tool.parse_arguments({"x": 2}), ctx())).content == '{"double": 4}'
    assert (await async_tool(async_tool.parse_arguments({"x": 3}), ctx())).content == "1.5"
    assert (await injected(injected.parse_arguments({}), ctx())).content == "s"


def test_argument_errors_are_clear() -> None:
    @tool
    def area(width: float, height: float) -> float:
        """Area."""
        return width * height

    with pytest.raises(ToolArgumentError) as info:
        area.parse_arguments({"width": "wide", "depth": 3})
    message = str(info.value)
    assert message.startswith("invalid arguments for tool 'area': ")
    assert "argument 'width': Input should be a valid number" in message
    assert "missing required argument 'height'" in message
    assert "unknown argument 'depth'" in message


def test_tool_subclass_with_pydantic_model() -> None:
    class EchoArgs(BaseModel):
        model_config = {"extra": "forbid"}
        text: str = Field(description="Text to repeat")

    class Echo(Tool):
        name = "echo"
        description = "Repeat the text."
        args_model = EchoArgs
        risk = Risk.SAFE
        idempotent = True

        async def invoke(self, args: EchoArgs, ctx: ToolContext) -> str:
            return args.text

    echo = Echo()
    assert echo.spec().parameters["properties"]["text"]["description"] == "Text to repeat"
    with pytest.raises(ToolArgumentError, match="unknown argument 'other'"):
        echo.parse_arguments({"text": "x", "other": 1})


@pytest.mark.parametrize("name", ["", "1abc", "has space", "x" * 65, "ünïcode", "a/b"])
def test_invalid_tool_names(name: str) -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        validate_tool_name(name)


def test_var_args_are_refused() -> None:
    with pytest.raises(TypeError, match=r"\*args/\*\*kwargs"):
        tool(name="varargs")(lambda *args: None)
