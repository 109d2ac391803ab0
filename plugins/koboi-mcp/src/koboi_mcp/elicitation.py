"""When an MCP server asks the user something during a call (elicitation).

Three answers, in order:

1. the call is being run again after its run was continued (``ctx.reply``):
   the reply is the answer (``{"action": "decline"}``, a form's values as an
   object, or text for a one-field form);
2. ``elicitation: terminal`` and a person at this terminal: asked there;
3. otherwise (``suspend``, the default) the run is suspended until someone
   replies — the server is told ``cancel`` and the call ends now; it runs again,
   with the reply, when the run continues. ``decline`` declines.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types

from koboi_mcp.config import ServerSettings
from koboi_mcp.connection import ActiveCall, stdin_is_terminal

Content = dict[str, str | int | float | bool | list[str] | None]


def _schema(params: types.ElicitRequestFormParams) -> dict[str, Any]:
    """The requested schema as JSON data (the SDK gives a mapping or a model)."""
    schema: Any = params.requested_schema
    if hasattr(schema, "model_dump"):
        schema = schema.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.loads(json.dumps(schema, default=str)) if isinstance(schema, Mapping) else {}


def _properties(params: types.ElicitRequestParams) -> dict[str, Any]:
    if isinstance(params, types.ElicitRequestFormParams):
        properties = _schema(params).get("properties") or {}
        return dict(properties) if isinstance(properties, Mapping) else {}
    return {}


def _coerce(value: Any, schema: Mapping[str, Any]) -> Any:
    kind = schema.get("type")
    if not isinstance(value, str):
        return value
    text = value.strip()
    if kind == "boolean":
        return text.lower() in ("y", "yes", "true", "1", "on")
    if kind == "integer":
        return int(text)
    if kind == "number":
        return float(text)
    if kind == "array":
        return [item.strip() for item in text.split(",") if item.strip()]
    return value


def _with_defaults(values: Mapping[str, Any], properties: Mapping[str, Any]) -> Content:
    """The reply's values (coerced to the schema's types), and the schema's defaults for
    the fields it leaves out."""
    content: Content = {k: _coerce(v, properties.get(k, {})) for k, v in values.items()}
    for name, schema in properties.items():
        if name not in content and isinstance(schema, Mapping) and "default" in schema:
            content[name] = schema["default"]
    return content


def answer_from_reply(reply: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    """The reply a suspended run was continued with, as the server's answer."""
    if isinstance(reply, str):
        stripped = reply.strip()
        if stripped.lower() in ("decline", "cancel"):
            return types.ElicitResult(action=stripped.lower())  # type: ignore[arg-type]
        if stripped.startswith("{"):
            with contextlib.suppress(ValueError):
                reply = json.loads(stripped)
    properties = _properties(params)
    if isinstance(reply, Mapping):
        action = reply.get("action")
        if action in ("decline", "cancel"):
            return types.ElicitResult(action=action)
        content = reply.get("content") if action == "accept" else reply
        values = dict(content) if isinstance(content, Mapping) else {}
        return types.ElicitResult(action="accept", content=_with_defaults(values, properties))
    if isinstance(params, types.ElicitRequestURLParams):
        return types.ElicitResult(action="accept")
    if len(properties) == 1:
        ((field, schema),) = properties.items()
        return types.ElicitResult(action="accept", content={field: _coerce(reply, schema)})
    return types.ElicitResult(action="decline")


def suspension_data(
    server: str, call: ActiveCall, params: types.ElicitRequestParams
) -> dict[str, Any]:
    """What the suspended run says it waits for: enough for a person or a UI to answer."""
    data: dict[str, Any] = {
        "mcp_server": server,
        "tool": call.tool,
        "message": params.message,
        "mode": params.mode,
    }
    if isinstance(params, types.ElicitRequestFormParams):
        data["requested_schema"] = _schema(params)
    else:
        data["url"] = params.url
    return data


async def _ask_at_terminal(params: types.ElicitRequestParams) -> types.ElicitResult:
    def ask() -> types.ElicitResult:
        print(f"\nMCP server asks: {params.message}", flush=True)
        if isinstance(params, types.ElicitRequestURLParams):
            print(f"  open: {params.url}", flush=True)
            done = input("  done? [y/N] ").strip().lower()
            return types.ElicitResult(action="accept" if done in ("y", "yes") else "decline")
        content: Content = {}
        for name, schema in _properties(params).items():
            shown = schema.get("title") or name
            default = schema.get("default")
            text = input(f"  {shown}" + (f" [{default}]" if default is not None else "") + ": ")
            if not text and default is not None:
                content[name] = default
            elif text:
                content[name] = _coerce(text, schema)
        if not content:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=content)

    return await anyio.to_thread.run_sync(ask)


class Elicitor:
    """Answers a server's elicitations for one server's calls (see the module docstring)."""

    def __init__(self, server: str, settings: ServerSettings) -> None:
        self.server = server
        self.settings = settings

    async def __call__(
        self, call: ActiveCall, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        ctx = call.ctx
        if ctx is not None and ctx.reply is not None:
            return answer_from_reply(ctx.reply, params)
        mode = self.settings.elicitation
        if mode == "decline" or ctx is None:
            return types.ElicitResult(action="decline")
        if mode == "terminal" and stdin_is_terminal():
            return await _ask_at_terminal(params)
        call.suspension = suspension_data(self.server, call, params)
        call.suspend.set()
        return types.ElicitResult(action="cancel")
