"""A test-only plugin: the tools the MCP conformance suite's server scenarios call.

Loaded only by ``serve_fixtures.py`` (through ``PluginHost.add_plugin``), never
installed: no config outside the conformance run can name these tools.
koboi tools answer in text, so the scenarios that want images, audio, embedded
resources, sampling, logging or elicitation from a tool are expected failures
(``expected_failures.yml`` says why, one by one).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from koboi import Risk, Tool, ToolContext, ToolError, hookimpl, tool
from koboi.messages import ToolSpec


@tool(risk=Risk.SAFE, idempotent=True, thread=False)
def test_simple_text() -> str:
    """Return a simple text."""
    return "This is a simple text response for testing."


@tool(risk=Risk.SAFE, idempotent=True, thread=False)
def test_error_handling() -> str:
    """Always fail."""
    raise ToolError("This tool intentionally returns an error for testing")


@tool(risk=Risk.SAFE, idempotent=True)
async def test_tool_with_progress(ctx: ToolContext) -> str:
    """Report progress three times."""
    for step in (0, 50, 100):
        ctx.emit("progress", {"progress": step, "total": 100})
    return "done"


SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


class _Anything(BaseModel):
    model_config = ConfigDict(extra="allow")


class SchemaTool(Tool):
    """A tool whose argument schema is written by hand (JSON Schema 2020-12)."""

    name = "json_schema_2020_12_tool"
    description = "Tool with JSON Schema 2020-12 features"
    args_model = _Anything
    risk = Risk.SAFE
    idempotent = True

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=SCHEMA_2020_12)

    def invoke(self, args: _Anything, ctx: ToolContext) -> str:
        return "ok"


@hookimpl
def koboi_register_tools(register: Any) -> None:
    for made in (test_simple_text, test_error_handling, test_tool_with_progress, SchemaTool()):
        register(made)
