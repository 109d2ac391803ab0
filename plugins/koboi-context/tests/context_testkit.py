"""A long scripted session for koboi-context's tests and benchmarks.

- :class:`WindowedModel`: a deterministic model with a context window. It counts
  every request with tiktoken (the counter koboi-tokens uses) and refuses one over
  its window, or one whose tool calls and results are not paired, with the HTTP
  400 and the words OpenAI's API uses. It answers from the last user message, so
  it does not care which older turns a strategy dropped.
- :class:`Conversation`: a runner that plays a scripted conversation of N turns in
  one run (each turn a user message, sometimes a tool call, always an answer); a
  resumed run goes on after the last turn it began.
- ``lookup``: the tool the model calls; some results are long.
- :data:`PLUGIN`: all three, as a plugin (``windowed``, ``conversation``,
  ``lookup``), for configs, ``koboi-replay`` and subprocesses.

Loaded by path (``load_testkit()`` in conftest.py, the benchmarks, the crash
script), so it needs no package.
"""

from __future__ import annotations

import random
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from koboi import RunHandle, Runner, hookimpl, tool
from koboi.errors import ProviderError
from koboi.events import AgentEvent
from koboi.messages import Message, ModelRequest, ModelResponse, ToolCall, Usage
from koboi.provider import ModelProvider
from koboi.sidecalls import call_purpose
from koboi_tokens.counters import tiktoken_counter
from koboi_tokens.requests import PER_REPLY, MessageTokens, tools_tokens

WORDS = [
    "river",
    "mountain",
    "copper",
    "ledger",
    "violet",
    "harbor",
    "engine",
    "signal",
    "orchard",
    "lantern",
    "meadow",
    "cipher",
    "granite",
    "falcon",
    "thistle",
    "beacon",
    "quarry",
    "ember",
    "saddle",
    "willow",
    "prism",
    "tundra",
    "cobalt",
    "marble",
    "sparrow",
    "atlas",
    "drift",
    "canyon",
    "velvet",
    "summit",
]
_TURN = re.compile(r"^Turn (\d+):")
_KEY = re.compile(r"key-\d+")


def filler(seed: int, words: int) -> str:
    return " ".join(random.Random(seed).choices(WORDS, k=words))


def asks_tool(turn: int) -> bool:
    return turn % 3 == 0


def turn_text(turn: int) -> str:
    """The user message of ``turn`` (1-based): 10 to 120 words, a lookup every third."""
    rng = random.Random(turn)
    text = f"Turn {turn}: " + filler(turn * 7 + 1, rng.randint(10, 120))
    if asks_tool(turn):
        text += f" Please look up key-{turn}."
    return text


def answer_text(turn: int, after_tool: bool) -> str:
    rng = random.Random(turn * 13)
    lead = f"Done with key-{turn}" if after_tool else f"Answer to turn {turn}"
    return f"{lead}: " + filler(turn * 13 + 5, rng.randint(5, 60))


@tool(risk="safe", idempotent=True, thread=False)
def lookup(key: str) -> str:
    """Look a key up in the scripted table.

    Args:
        key: The key, as key-<number>.
    """
    return lookup_result(key)


def lookup_result(key: str) -> str:
    """What ``lookup`` answers: mostly short; every seventh result a few hundred tokens."""
    number = int(key.rsplit("-", 1)[-1]) if key.rsplit("-", 1)[-1].isdigit() else 0
    words = 300 if number % 7 == 0 else 20 + number % 60
    return f"value of {key}: " + filler(number * 31, words)


def pairing_problem(messages: Sequence[Message]) -> str | None:
    """What OpenAI's API says of a request whose tool calls and results are not paired."""
    waiting: list[str] = []
    for message in messages:
        if message.role == "tool":
            if message.tool_call_id not in waiting:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
            waiting.remove(message.tool_call_id)
            continue
        if waiting:
            break
        waiting = [call.id for call in message.tool_calls]
    if waiting:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(waiting)}"
        )
    return None


class WindowedModel(ModelProvider):
    """A deterministic model that refuses what a real one would: see the module."""

    name = "windowed"

    def __init__(
        self, window: int = 4000, encoding: str = "o200k_base", *, pause_at: int | None = None
    ) -> None:
        self.window = window
        self.model = f"windowed-{window}"
        self.counter = tiktoken_counter(encoding)
        # Each message counted once (a long session sends the same ones again and again).
        self._messages = MessageTokens(self.counter)
        self._tools: tuple[object, int] | None = None
        #: Tokens of every request answered, by purpose (None: the loop's own calls).
        self.sizes: list[tuple[str | None, int]] = []
        #: Turns at which a call sleeps (so a test can kill the process there).
        self.pause_at = pause_at
        #: For the loop's calls: the first message of each request, and its user messages.
        self.firsts: list[str] = []
        self.user_messages: list[list[str]] = []

    def context_window(self) -> int | None:
        return self.window

    def cache_identity(self) -> dict[str, Any]:
        return {"provider": self.name, "model": self.model}

    def count(self, request: ModelRequest) -> int:
        """The request's tokens, as koboi_tokens.request_tokens counts them."""
        if self._tools is None or self._tools[0] is not request.tools:
            self._tools = (request.tools, tools_tokens(self.counter, request.tools))
        assert request.response_format is None
        return self._messages.total(request.messages) + self._tools[1] + PER_REPLY

    async def complete(self, request: ModelRequest) -> ModelResponse:
        tokens = self.count(request)
        problem = pairing_problem(request.messages)
        if problem is not None:
            raise ProviderError(f"HTTP 400 (invalid_request_error): {problem}", status=400)
        if tokens > self.window:
            raise ProviderError(
                "HTTP 400 (invalid_request_error, context_length_exceeded): This model's "
                f"maximum context length is {self.window} tokens. However, your messages "
                f"resulted in {tokens} tokens. Please reduce the length of the messages.",
                status=400,
            )
        purpose = call_purpose()
        self.sizes.append((purpose, tokens))
        if purpose is not None:
            message = Message.assistant(self._side_answer(purpose, request))
        else:
            self.firsts.append(request.messages[0].content)
            self.user_messages.append(
                [
                    m.content[: m.content.index(":") + 1]
                    for m in request.messages
                    if m.role == "user"
                ]
            )
            message = await self._answer(request)
        usage = Usage(
            input_tokens=tokens,
            output_tokens=max(1, self.counter.count(message.content)),
            requests=1,
        )
        finish = "tool_calls" if message.tool_calls else "stop"
        return ModelResponse(message=message, usage=usage, finish_reason=finish, model=self.model)

    async def _answer(self, request: ModelRequest) -> Message:
        messages = request.messages
        users = [i for i, m in enumerate(messages) if m.role == "user"]
        found = _TURN.match(messages[users[-1]].content) if users else None
        turn = int(found.group(1)) if found else 0
        if self.pause_at is not None and turn == self.pause_at:
            await anyio.sleep(3600)  # the test kills the process here
        after_tool = bool(users) and any(m.role == "tool" for m in messages[users[-1] :])
        if asks_tool(turn) and not after_tool:
            call = ToolCall(id=f"call_{turn}", name="lookup", arguments={"key": f"key-{turn}"})
            return Message.assistant("", (call,))
        return Message.assistant(answer_text(turn, after_tool))

    def _side_answer(self, purpose: str, request: ModelRequest) -> str:
        text = request.messages[-1].content
        if purpose == "context.summary":
            turns = [int(n) for n in re.findall(r"Turn (\d+):", text)]
            keys = sorted(set(_KEY.findall(text)), key=lambda k: int(k[4:]))
            through = max(turns) if turns else 0
            return f"Turns up to {through} happened. Keys looked up: {', '.join(keys[-40:])}."
        return "ok"


class Conversation(Runner):
    """Plays turns 2..N of the scripted conversation after the run's own message."""

    name = "conversation"

    def __init__(self, turns: int) -> None:
        self.turns = turns

    async def run(self, run: RunHandle) -> AsyncIterator[AgentEvent]:
        begun = run.plugin_events("conversation")
        start = int(begun[-1].data["turn"]) + 1 if begun else 2
        async for event in run.loop():  # the first turn, or the one a crash interrupted
            yield event
        for turn in range(start, self.turns + 1):
            if run.ending is None or run.ending.outcome != "completed":
                return
            run.info.record("conversation.turn", {"turn": turn})
            run.add_message(turn_text(turn))
            async for event in run.loop():
                yield event


class WindowedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    window: int = Field(default=4000, description="The window, in tokens.")
    encoding: str = Field(default="o200k_base", description="The tiktoken encoding counting it.")


class ConversationOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turns: int = Field(default=100, ge=1, description="Turns to play.")


class _Plugin:
    """``windowed``, ``conversation`` and ``lookup``, registered like a plugin's."""

    @hookimpl
    def koboi_register_providers(self, register: Any) -> None:
        register(
            "windowed",
            lambda o: WindowedModel(o.window, o.encoding),
            options=WindowedOptions,
            description="A scripted model with a context window (tests).",
        )

    @hookimpl
    def koboi_register_runners(self, register: Any) -> None:
        register(
            "conversation",
            lambda o, _config: Conversation(o.turns),
            options=ConversationOptions,
            description="A scripted conversation of N turns (tests).",
        )

    @hookimpl
    def koboi_register_tools(self, register: Any) -> None:
        register(lookup)


PLUGIN = _Plugin()


def session_config(
    strategy: str, *, turns: int, window: int = 4000, **context: Any
) -> dict[str, Any]:
    """The config of a scripted session of ``turns`` turns under ``strategy``."""
    return {
        "agent": {
            "name": f"long-{strategy}",
            "stream": False,
            "system_prompt": "You are a careful assistant. Use lookup for keys.",
            "max_iterations": 100_000,
            "runner": {"name": "conversation", "turns": turns},
        },
        "llm": {"provider": "windowed", "window": window},
        "tools": {"builtin": ["lookup"]},
        "context": {"strategy": strategy, "tokenizer": "o200k_base", **context},
    }
