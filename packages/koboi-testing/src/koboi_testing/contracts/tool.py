"""Contract suite for :class:`koboi.tools.Tool` implementations."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from koboi.errors import ToolArgumentError
from koboi.messages import ToolSpec
from koboi.sandbox import PassthroughSandbox
from koboi.tools import Risk, Tool, ToolContext, ToolResult, validate_tool_name

_UNKNOWN_FIELD = "koboi_contract_unknown_argument"


class ToolContract:
    """Behaviour every :class:`~koboi.tools.Tool` must show.

    **Required fixtures** (define them in the subclass):

    ``tool``
        The tool instance under test.
    ``valid_arguments``
        A ``dict`` of arguments the tool accepts, as a model would send them.
        The suite really runs the tool with them (in ``tool_context``), so
        choose arguments that are harmless there.

    **Optional fixtures** (override in the subclass):

    ``invalid_arguments``
        A list of argument dicts the tool must refuse (wrong types, out-of-range
        values...). Default: ``[]``. Unknown fields and missing required
        fields are always checked.
    ``tool_context``
        The :class:`~koboi.tools.ToolContext` to run the tool with. Default: a
        passthrough sandbox in ``tmp_path`` (the ``koboi_tool_context`` fixture).
    """

    @pytest.fixture
    def invalid_arguments(self) -> Sequence[Mapping[str, Any]]:
        return []

    @pytest.fixture
    def tool_context(self, tmp_path: Path) -> ToolContext:
        return ToolContext(
            session_id="contract-session",
            call_id="contract-call-1",
            step=1,
            sandbox=PassthroughSandbox(workdir=tmp_path),
            workdir=tmp_path,
        )

    # -- description -------------------------------------------------------

    def test_is_a_tool(self, tool: Tool) -> None:
        assert isinstance(tool, Tool)

    def test_name_is_valid(self, tool: Tool) -> None:
        assert validate_tool_name(tool.name) == tool.name

    def test_description_is_not_empty(self, tool: Tool) -> None:
        assert isinstance(tool.description, str)
        assert tool.description.strip(), "the model chooses tools by their description"

    def test_risk_and_idempotent_are_declared(self, tool: Tool) -> None:
        assert isinstance(tool.risk, Risk)
        assert isinstance(tool.idempotent, bool)

    def test_spec_describes_the_tool(self, tool: Tool) -> None:
        spec = tool.spec()
        assert isinstance(spec, ToolSpec)
        assert spec.name == tool.name
        assert spec.description == tool.description
        assert tool.spec() == spec, "spec() must be stable"

    def test_parameters_are_a_json_object_schema(self, tool: Tool) -> None:
        parameters = tool.spec().parameters
        assert parameters.get("type") == "object"
        properties = parameters.get("properties", {})
        assert isinstance(properties, dict)
        required = parameters.get("required", [])
        assert isinstance(required, list)
        missing = set(required) - set(properties)
        assert not missing, f"required arguments without a schema: {sorted(missing)}"
        # What providers send over the wire must be plain JSON.
        assert json.loads(json.dumps(parameters)) == parameters

    def test_valid_arguments_match_the_schema(
        self, tool: Tool, valid_arguments: Mapping[str, Any]
    ) -> None:
        parameters = tool.spec().parameters
        properties = parameters.get("properties", {})
        unknown = set(valid_arguments) - set(properties)
        assert not unknown, f"valid_arguments use names the schema does not declare: {unknown}"
        absent = set(parameters.get("required", [])) - set(valid_arguments)
        assert not absent, f"valid_arguments lack required arguments: {sorted(absent)}"

    # -- argument validation -------------------------------------------------

    def test_valid_arguments_parse(self, tool: Tool, valid_arguments: Mapping[str, Any]) -> None:
        parsed = tool.parse_arguments(valid_arguments)
        assert isinstance(parsed, BaseModel)
        assert isinstance(parsed, tool.args_model)

    def test_unknown_argument_is_refused(
        self, tool: Tool, valid_arguments: Mapping[str, Any]
    ) -> None:
        with pytest.raises(ToolArgumentError) as caught:
            tool.parse_arguments({**valid_arguments, _UNKNOWN_FIELD: 1})
        message = str(caught.value)
        assert tool.name in message, "the model must learn which tool it called wrongly"
        assert _UNKNOWN_FIELD in message, "the message must name the offending argument"

    def test_missing_required_argument_is_refused(
        self, tool: Tool, valid_arguments: Mapping[str, Any]
    ) -> None:
        required = tool.spec().parameters.get("required", [])
        if not required:
            pytest.skip("the tool has no required arguments")
        for name in required:
            arguments = {k: v for k, v in valid_arguments.items() if k != name}
            with pytest.raises(ToolArgumentError) as caught:
                tool.parse_arguments(arguments)
            assert tool.name in str(caught.value)
            assert name in str(caught.value)

    def test_invalid_arguments_are_refused(
        self, tool: Tool, invalid_arguments: Sequence[Mapping[str, Any]]
    ) -> None:
        if not invalid_arguments:
            pytest.skip("no invalid_arguments examples given")
        for arguments in invalid_arguments:
            with pytest.raises(ToolArgumentError) as caught:
                tool.parse_arguments(arguments)
            assert tool.name in str(caught.value), f"message for {arguments!r} lacks the tool name"

    # -- invocation ----------------------------------------------------------

    @pytest.mark.anyio
    async def test_call_returns_a_tool_result(
        self, tool: Tool, valid_arguments: Mapping[str, Any], tool_context: ToolContext
    ) -> None:
        result = await tool(tool.parse_arguments(valid_arguments), tool_context)
        assert isinstance(result, ToolResult)
        assert isinstance(result.content, str)
        assert isinstance(result.is_error, bool)

    @pytest.mark.anyio
    async def test_call_through_the_context_sandbox(
        self, tool: Tool, valid_arguments: Mapping[str, Any], tool_context: ToolContext
    ) -> None:
        result = await tool_context.sandbox.run_tool(
            tool, tool.parse_arguments(valid_arguments), tool_context
        )
        assert isinstance(result, ToolResult)
        assert isinstance(result.content, str)
