"""``ScriptedProvider``: a model that answers from a script or from regex rules.

Everything it says is a pure function of the request's messages, so a run can
be replayed, resumed from a journal, or asserted on in a test:

* the *script* turn used for a call is the number of assistant messages
  already in the conversation;
* *rules* look at the last user message and at what happened after it (nothing
  yet: answer or call the rule's tool; a tool result: report it).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Literal

import anyio.lowlevel

from koboi.errors import ProviderError
from koboi.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseDone,
    TextDelta,
    ToolCall,
    Usage,
)
from koboi.provider import ModelProvider
from koboi_scripted.config import (
    DEFAULT_FALLBACK,
    DEFAULT_TOOL_REPLY,
    Rule,
    ScriptedOptions,
    ScriptedToolCall,
    Turn,
)

TurnLike = str | Turn | ToolCall | ScriptedToolCall | Message | Mapping[str, Any] | Sequence[Any]
"""What :meth:`ScriptedProvider.from_turns` accepts for one turn."""

_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_WORD = re.compile(r"\S+\s*|\s+")


class ScriptedProvider(ModelProvider):
    """An offline, deterministic :class:`~koboi.provider.ModelProvider`.

    Build it from validated options (what the ``llm:`` config section gives),
    or in tests with :meth:`from_turns` / :meth:`from_rules`. Every request it
    receives is appended to :attr:`requests`, so tests can check what the
    model was shown.
    """

    name = "scripted"

    def __init__(self, options: ScriptedOptions | None = None) -> None:
        self.options = options if options is not None else ScriptedOptions()
        self.model = self.options.model
        self._rules = [(rule, re.compile(rule.match, re.IGNORECASE)) for rule in self.options.rules]
        self.requests: list[ModelRequest] = []

    def cache_identity(self) -> dict[str, Any]:
        # The script and rules decide the answers: a changed script must not be
        # served answers recorded from the old one.
        options = self.options.model_dump_json()
        digest = hashlib.sha256(options.encode()).hexdigest()[:16]
        return {"provider": self.name, "model": self.model, "script": digest}

    # -- constructors for tests ---------------------------------------------

    @classmethod
    def from_turns(
        cls,
        turns: Iterable[TurnLike],
        *,
        rules: Iterable[Rule | Mapping[str, Any]] = (),
        fallback: str = DEFAULT_FALLBACK,
        on_exhausted: Literal["fallback", "error"] = "error",
        model: str = "scripted",
    ) -> ScriptedProvider:
        """A provider replaying ``turns`` in order, one per model call.

        Each turn may be a string (a text reply), a :class:`~koboi.messages.ToolCall`
        or a ``{"name": ..., "arguments": {...}}`` dict (one tool call), a list of
        those (several tool calls in one turn), a ``{"reply": ..., "tool_calls":
        [...]}`` dict or :class:`Turn`, or an assistant :class:`~koboi.messages.Message`.
        A ``ToolCall``'s own id is kept; other calls get ``call_<turn>_<index>``.

        Unlike the config default, running past the last turn raises a
        :class:`~koboi.errors.ProviderError` (``on_exhausted="error"``), so a
        test that makes more model calls than it scripted fails loudly.
        """
        options = ScriptedOptions(
            model=model,
            script=[_to_turn(item) for item in turns],
            rules=[Rule.model_validate(rule) for rule in rules],
            fallback=fallback,
            on_exhausted=on_exhausted,
        )
        return cls(options)

    @classmethod
    def from_rules(
        cls,
        rules: Iterable[Rule | Mapping[str, Any]],
        *,
        fallback: str = DEFAULT_FALLBACK,
        model: str = "scripted",
    ) -> ScriptedProvider:
        """A provider answering only by ``rules``, with ``fallback`` when none matches."""
        options = ScriptedOptions(
            model=model,
            rules=[Rule.model_validate(rule) for rule in rules],
            fallback=fallback,
        )
        return cls(options)

    # -- the ModelProvider contract -----------------------------------------

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        message, turn = self._answer(request.messages)
        if turn is not None and turn.usage is not None:
            usage = Usage(
                input_tokens=turn.usage.input_tokens,
                output_tokens=turn.usage.output_tokens,
                reasoning_tokens=turn.usage.reasoning_tokens,
                requests=1,
            )
        else:
            usage = Usage(
                input_tokens=max(1, sum(_count_words(m) for m in request.messages)),
                output_tokens=max(1, _count_words(message)),
                requests=1,
            )
        finish: FinishReason = "tool_calls" if message.tool_calls else "stop"
        if not message.tool_calls and turn is not None and turn.finish_reason is not None:
            finish = turn.finish_reason
        return ModelResponse(message=message, usage=usage, finish_reason=finish, model=self.model)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Yield the reply word by word (whitespace kept), then the whole response."""
        response = await self.complete(request)
        for piece in split_words(response.message.content):
            # Give the event loop a turn between pieces, like a network stream would.
            await anyio.lowlevel.checkpoint()
            yield TextDelta(text=piece)
        yield ResponseDone(response=response)

    # -- answering ------------------------------------------------------------

    def _answer(self, messages: Sequence[Message]) -> tuple[Message, Turn | None]:
        """The reply, and the script turn it came from (None for rules and the fallback)."""
        turn = sum(1 for m in messages if m.role == "assistant")
        script = self.options.script
        if turn < len(script):
            return _script_message(script[turn], turn), script[turn]
        ruled = self._rule_message(messages, turn)
        if ruled is not None:
            return ruled, None
        if self.options.on_exhausted == "error":
            raise ProviderError(self._exhausted_message(messages, turn))
        return Message.assistant(self.options.fallback), None

    def _rule_message(self, messages: Sequence[Message], turn: int) -> Message | None:
        last_user = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None
        )
        if last_user is None:
            return None
        matched = self._match(messages[last_user].content)
        if matched is None:
            return None
        rule, values = matched
        after = messages[last_user + 1 :]
        if not any(m.role == "assistant" for m in after):
            # First call for this user message: act on it.
            if rule.tool is None:
                return Message.assistant(fill(rule.reply or "", values))
            call = ToolCall(
                id=f"call_{turn}_0", name=rule.tool, arguments=fill(rule.arguments, values)
            )
            return Message.assistant(tool_calls=(call,))
        # Context a plugin added for this call (system messages) follows the result.
        answered = [m for m in after if m.role != "system"]
        if rule.tool is not None and answered and answered[-1].role == "tool":
            # The rule's tool has answered: report its result.
            values["result"] = answered[-1].content
            return Message.assistant(fill(rule.reply or DEFAULT_TOOL_REPLY, values))
        # The rule already had its say for this user message.
        return None

    def _match(self, text: str) -> tuple[Rule, dict[str, str]] | None:
        """The first rule whose pattern is found in ``text``, with its group values."""
        for rule, pattern in self._rules:
            found = pattern.search(text)
            if found is not None:
                return rule, _group_values(found)
        return None

    def _exhausted_message(self, messages: Sequence[Message], turn: int) -> str:
        script = self.options.script
        if script:
            text = (
                f"scripted provider: the script has {len(script)} turn(s) but this is model "
                f"call {turn + 1} (the conversation already holds {turn} assistant message(s))"
            )
            if self._rules:
                text += " and no rule answers it"
        else:
            last_user = next((m.content for m in reversed(messages) if m.role == "user"), None)
            text = f"scripted provider: no rule answers the last user message {last_user!r}"
        return text + "; add script turns or rules, or set on_exhausted: fallback"


def split_words(content: str) -> list[str]:
    """Split ``content`` into word-sized pieces whose concatenation is exactly ``content``."""
    return _WORD.findall(content)


def fill(template: Any, values: Mapping[str, str]) -> Any:
    """Replace ``{name}`` placeholders in ``template`` (and in nested lists and dicts).

    Placeholders whose name is not in ``values`` are left as they are, so
    literal braces (JSON, code) survive.
    """
    if isinstance(template, str):
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)
    if isinstance(template, Mapping):
        return {key: fill(value, values) for key, value in template.items()}
    if isinstance(template, list | tuple):
        return [fill(value, values) for value in template]
    return template


def _group_values(found: re.Match[str]) -> dict[str, str]:
    values = {"0": found.group(0)}
    values.update({str(i): g or "" for i, g in enumerate(found.groups(), start=1)})
    values.update({name: g or "" for name, g in found.groupdict().items()})
    return values


def _script_message(turn: Turn, index: int) -> Message:
    calls = tuple(
        ToolCall(
            id=call.id or f"call_{index}_{i}",
            name=call.name,
            arguments=copy.deepcopy(call.arguments),
        )
        for i, call in enumerate(turn.tool_calls)
    )
    return Message.assistant(turn.reply or "", tool_calls=calls)


def _count_words(message: Message) -> int:
    words = len(message.content.split())
    for call in message.tool_calls:
        words += 1 + len(json.dumps(call.arguments).split())
    return words


def _to_turn(item: TurnLike) -> Turn:
    if isinstance(item, Turn):
        return item
    if isinstance(item, str):
        return Turn(reply=item)
    if isinstance(item, ToolCall | ScriptedToolCall):
        return Turn(tool_calls=[_to_call(item)])
    if isinstance(item, Message):
        if item.role != "assistant":
            raise TypeError(f"a script turn must be an assistant message, not {item.role!r}")
        return Turn(
            reply=item.content if item.content or not item.tool_calls else None,
            tool_calls=[_to_call(call) for call in item.tool_calls],
        )
    if isinstance(item, Mapping):
        if "name" in item:
            return Turn(tool_calls=[_to_call(item)])
        return Turn.model_validate(dict(item))
    if isinstance(item, Sequence):
        return Turn(tool_calls=[_to_call(call) for call in item])
    raise TypeError(f"cannot make a script turn from {type(item).__name__}: {item!r}")


def _to_call(item: Any) -> ScriptedToolCall:
    if isinstance(item, ScriptedToolCall):
        return item
    if isinstance(item, ToolCall):
        return ScriptedToolCall(name=item.name, arguments=dict(item.arguments), id=item.id)
    if isinstance(item, Mapping):
        return ScriptedToolCall.model_validate(dict(item))
    raise TypeError(f"cannot make a tool call from {type(item).__name__}: {item!r}")
