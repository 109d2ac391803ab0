"""The options of the ``scripted`` provider: the ``llm:`` section minus ``provider``.

Only pydantic here, so the plugin module can register the model without
importing anything else.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_FALLBACK = "I have no scripted answer for that."
DEFAULT_TOOL_REPLY = "The result is {result}."


class ScriptedToolCall(BaseModel):
    """One tool call the scripted model makes."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Name of the tool to call, exactly as registered.")
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="Arguments of the call (a JSON object)."
    )
    id: str | None = Field(
        default=None,
        description="Call id; by default 'call_<turn>_<index>', so runs are reproducible.",
    )


class ScriptedUsage(BaseModel):
    """Token counts a script turn reports instead of the default word counts."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int = Field(ge=0, description="Prompt tokens to report for this turn.")
    output_tokens: int = Field(ge=0, description="Completion tokens to report for this turn.")
    reasoning_tokens: int = Field(default=0, ge=0, description="Reasoning tokens to report.")


class Turn(BaseModel):
    """One model call of a script: a text reply, tool calls, or both.

    A bare string is accepted as shorthand for ``{reply: "..."}``.
    """

    model_config = ConfigDict(extra="forbid")

    reply: str | None = Field(
        default=None, description="Assistant text of this turn (may accompany tool calls)."
    )
    tool_calls: list[ScriptedToolCall] = Field(
        default_factory=list, description="Tool calls the model makes on this turn."
    )
    usage: ScriptedUsage | None = Field(
        default=None,
        description="Token usage to report (e.g. to test budgets); default: word counts.",
    )
    finish_reason: Literal["stop", "length", "content_filter"] | None = Field(
        default=None,
        description="Finish reason to report for a text turn; default 'stop'.",
    )

    @model_validator(mode="before")
    @classmethod
    def _text_shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"reply": value}
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> Turn:
        if self.reply is None and not self.tool_calls:
            raise ValueError("a script turn needs a 'reply', 'tool_calls', or both")
        return self


class Rule(BaseModel):
    """Answer user messages that match a regular expression.

    With ``tool``, the model first calls that tool (``{group}`` placeholders in
    ``arguments`` are filled from the regex's named groups), then, once it sees
    the tool's result, replies with ``reply`` where ``{result}`` is the tool's
    output. Without ``tool``, it replies at once with ``reply``.
    """

    model_config = ConfigDict(extra="forbid")

    match: str = Field(
        description=(
            "Python regular expression searched (case-insensitively) in the last user message."
        )
    )
    tool: str | None = Field(
        default=None, description="Tool to call when the rule matches; omit for a plain reply."
    )
    arguments: dict[str, Any] = Field(
        default_factory=dict,
        description="Tool arguments; '{name}' in strings is replaced by the regex group 'name'.",
    )
    reply: str | None = Field(
        default=None,
        description=(
            "Reply template: '{group}' placeholders, and '{result}' (the last tool result) "
            f"for tool rules. Default for tool rules: {DEFAULT_TOOL_REPLY!r}."
        ),
    )

    @field_validator("match")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _does_something(self) -> Rule:
        if self.tool is None and self.reply is None:
            raise ValueError("a rule needs a 'tool', a 'reply', or both")
        return self


class ScriptedOptions(BaseModel):
    """Options of the offline, deterministic ``scripted`` model provider."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(default="scripted", description="Model name reported in responses.")
    script: list[Turn] = Field(
        default_factory=list,
        description=(
            "Turns replayed in order: turn N answers the model call that sees N assistant "
            "messages in the conversation."
        ),
    )
    rules: list[Rule] = Field(
        default_factory=list,
        description="Regex rules tried in order against the last user message.",
    )
    fallback: str = Field(
        default=DEFAULT_FALLBACK, description="Reply used when neither script nor rules answer."
    )
    on_exhausted: Literal["fallback", "error"] = Field(
        default="fallback",
        description=(
            "When the script has no turn left: 'fallback' goes on to the rules and the fallback "
            "reply; 'error' raises a ProviderError."
        ),
    )
