from __future__ import annotations

import pytest
from pydantic import ValidationError

from koboi.errors import ProviderError
from koboi.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    TextDelta,
    ToolCall,
)
from koboi_scripted import Rule, ScriptedOptions, ScriptedProvider
from koboi_scripted.provider import fill, split_words

CALCULATOR_RULE = {
    "match": r"(?P<expr>\d[\d\s+*/().-]*\d)",
    "tool": "calculator",
    "arguments": {"expression": "{expr}"},
    "reply": "{expr} = {result}",
}


def request(*messages: Message) -> ModelRequest:
    return ModelRequest(messages=messages)


async def complete(provider: ScriptedProvider, *messages: Message) -> ModelResponse:
    return await provider.complete(request(*messages))


# -- script replay -----------------------------------------------------------


@pytest.mark.anyio
async def test_script_turn_is_the_number_of_assistant_messages() -> None:
    provider = ScriptedProvider.from_turns(
        [{"name": "lookup", "arguments": {"q": "x"}}, "found it", "bye"]
    )
    user = Message.user("find x")
    first = await complete(provider, Message.system("be brief"), user)
    assert first.finish_reason == "tool_calls"
    assert first.message.role == "assistant"
    assert first.message.tool_calls == (
        ToolCall(id="call_0_0", name="lookup", arguments={"q": "x"}),
    )

    call = first.message.tool_calls[0]
    history = (user, first.message, Message.tool_result(call, "x=1"))
    second = await complete(provider, *history)
    assert second.message.content == "found it"
    assert second.message.tool_calls == ()
    assert second.finish_reason == "stop"

    third = await complete(provider, *history, second.message, Message.user("thanks"))
    assert third.message.content == "bye"


@pytest.mark.anyio
async def test_replay_is_deterministic_and_stateless() -> None:
    """The answer depends only on the messages: a resumed run gets the same turn."""
    turns = ["one", [{"name": "a"}, {"name": "b", "arguments": {"n": 2}}], "three"]
    convo = (
        Message.user("hi"),
        Message.assistant("one"),
        Message.user("again"),
    )
    fresh = ScriptedProvider.from_turns(turns)
    used = ScriptedProvider.from_turns(turns)
    await complete(used, Message.user("warm up"))
    a = await complete(fresh, *convo)
    b = await complete(used, *convo)
    assert a == b
    assert [c.id for c in a.message.tool_calls] == ["call_1_0", "call_1_1"]
    assert [c.name for c in a.message.tool_calls] == ["a", "b"]
    assert a.message.tool_calls[1].arguments == {"n": 2}


@pytest.mark.anyio
async def test_from_turns_accepts_toolcalls_turn_dicts_and_messages() -> None:
    provider = ScriptedProvider.from_turns(
        [
            ToolCall(id="mine", name="echo", arguments={"text": "hi"}),
            {"reply": "calling", "tool_calls": [{"name": "echo"}]},
            Message.assistant("from a message"),
        ]
    )
    r0 = await complete(provider, Message.user("go"))
    assert r0.message.tool_calls[0].id == "mine"
    r1 = await complete(provider, Message.user("go"), Message.assistant("x"))
    assert r1.message.content == "calling"
    assert r1.message.tool_calls == (ToolCall(id="call_1_0", name="echo", arguments={}),)
    r2 = await complete(
        provider, Message.user("go"), Message.assistant("x"), Message.assistant("y")
    )
    assert r2.message.content == "from a message"


def test_from_turns_refuses_what_it_cannot_read() -> None:
    with pytest.raises(TypeError):
        ScriptedProvider.from_turns([42])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        ScriptedProvider.from_turns([Message.user("not a model turn")])
    with pytest.raises(ValidationError):
        ScriptedProvider.from_turns([{}])


@pytest.mark.anyio
async def test_script_arguments_are_not_shared_between_calls() -> None:
    provider = ScriptedProvider.from_turns([{"name": "t", "arguments": {"items": [1]}}])
    first = await complete(provider, Message.user("go"))
    first.message.tool_calls[0].arguments["items"].append(2)
    second = await complete(provider, Message.user("go"))
    assert second.message.tool_calls[0].arguments == {"items": [1]}


@pytest.mark.anyio
async def test_exhausted_script_raises_a_clear_provider_error() -> None:
    provider = ScriptedProvider.from_turns(["only"])
    with pytest.raises(ProviderError, match=r"script has 1 turn\(s\) but this is model call 2"):
        await complete(provider, Message.user("a"), Message.assistant("only"), Message.user("b"))


@pytest.mark.anyio
async def test_exhausted_script_falls_back_when_configured() -> None:
    provider = ScriptedProvider(
        ScriptedOptions.model_validate(
            {"script": ["only"], "fallback": "nothing more", "on_exhausted": "fallback"}
        )
    )
    response = await complete(
        provider, Message.user("a"), Message.assistant("only"), Message.user("b")
    )
    assert response.message.content == "nothing more"


@pytest.mark.anyio
async def test_exhausted_script_goes_on_to_the_rules() -> None:
    provider = ScriptedProvider.from_turns(
        ["scripted hello"], rules=[{"match": "weather", "reply": "Sunny."}]
    )
    convo = (Message.user("hi"), Message.assistant("scripted hello"))
    response = await complete(provider, *convo, Message.user("And the weather?"))
    assert response.message.content == "Sunny."
    with pytest.raises(ProviderError, match="no rule answers it"):
        await complete(provider, *convo, Message.user("something else"))


# -- rules -------------------------------------------------------------------


@pytest.mark.anyio
async def test_rule_calls_tool_with_substituted_groups_then_reports_result() -> None:
    provider = ScriptedProvider.from_rules([CALCULATOR_RULE])
    user = Message.user("What is 2 + 2?")
    first = await complete(provider, Message.system("You are helpful."), user)
    assert first.finish_reason == "tool_calls"
    assert first.message.tool_calls == (
        ToolCall(id="call_0_0", name="calculator", arguments={"expression": "2 + 2"}),
    )

    call = first.message.tool_calls[0]
    second = await complete(provider, user, first.message, Message.tool_result(call, "4"))
    assert second.message.content == "2 + 2 = 4"
    assert second.finish_reason == "stop"


@pytest.mark.anyio
async def test_rule_match_is_case_insensitive_and_first_rule_wins() -> None:
    provider = ScriptedProvider.from_rules(
        [
            {"match": r"my name is (?P<name>\w+)", "reply": "Hello, {name}!"},
            {"match": "name", "reply": "second rule"},
        ]
    )
    response = await complete(provider, Message.user("MY NAME IS Ada"))
    assert response.message.content == "Hello, Ada!"


@pytest.mark.anyio
async def test_rule_matches_only_the_last_user_message() -> None:
    provider = ScriptedProvider.from_rules([{"match": "ping", "reply": "pong"}])
    convo = (Message.user("ping"), Message.assistant("pong"), Message.user("hello"))
    response = await complete(provider, *convo)
    assert response.message.content == provider.options.fallback


@pytest.mark.anyio
async def test_tool_rule_default_reply_and_turn_numbered_ids() -> None:
    provider = ScriptedProvider.from_rules(
        [
            {
                "match": r"time in (?P<zone>\S+)",
                "tool": "current_time",
                "arguments": {"timezone": "{zone}"},
            }
        ]
    )
    earlier = (Message.user("hi"), Message.assistant("hello"))
    user = Message.user("What is the time in Europe/Paris")
    first = await complete(provider, *earlier, user)
    (call,) = first.message.tool_calls
    assert call.id == "call_1_0"
    assert call.arguments == {"timezone": "Europe/Paris"}
    second = await complete(
        provider, *earlier, user, first.message, Message.tool_result(call, "12:00")
    )
    assert second.message.content == "The result is 12:00."


@pytest.mark.anyio
async def test_rule_reply_uses_the_last_tool_result() -> None:
    provider = ScriptedProvider.from_rules([{"match": "go", "tool": "t", "reply": "got {result}"}])
    user = Message.user("go")
    first = await complete(provider, user)
    call = first.message.tool_calls[0]
    other = ToolCall(id="other", name="t")
    second = await complete(
        provider,
        user,
        first.message,
        Message.tool_result(call, "first"),
        Message.tool_result(other, "second"),
    )
    assert second.message.content == "got second"


@pytest.mark.anyio
async def test_context_added_for_the_call_after_the_result_does_not_hide_it() -> None:
    """Plugins add call-scope context (system messages) after the conversation."""
    provider = ScriptedProvider.from_rules([{"match": "go", "tool": "t", "reply": "got {result}"}])
    user = Message.user("go")
    first = await complete(provider, user)
    call = first.message.tool_calls[0]
    later = await complete(
        provider, user, first.message, Message.tool_result(call, "42"), Message.system("recalled")
    )
    assert later.message.content == "got 42"


@pytest.mark.anyio
async def test_after_the_rule_replied_the_fallback_answers() -> None:
    provider = ScriptedProvider.from_rules([{"match": "go", "tool": "t"}], fallback="done")
    user = Message.user("go")
    first = await complete(provider, user)
    call = first.message.tool_calls[0]
    reply = Message.assistant("The result is 1.")
    third = await complete(provider, user, first.message, Message.tool_result(call, "1"), reply)
    assert third.message.content == "done"


@pytest.mark.anyio
async def test_fallback_when_nothing_matches_or_no_user_message() -> None:
    provider = ScriptedProvider.from_rules([CALCULATOR_RULE])
    no_match = await complete(provider, Message.user("Tell me a joke"))
    assert no_match.message.content == "I have no scripted answer for that."
    assert no_match.finish_reason == "stop"
    no_user = await complete(provider, Message.system("system only"))
    assert no_user.message.content == "I have no scripted answer for that."


@pytest.mark.anyio
async def test_rules_with_error_on_exhausted() -> None:
    provider = ScriptedProvider(
        ScriptedOptions(rules=[Rule(match="x", reply="y")], on_exhausted="error")
    )
    with pytest.raises(ProviderError, match="no rule answers the last user message 'hello'"):
        await complete(provider, Message.user("hello"))


def test_fill_substitutes_known_placeholders_only() -> None:
    values = {"a": "1", "b": "2"}
    template = {"x": "{a}+{b}", "y": ["{a}", {"z": "{missing}"}], "n": 3, "j": '{"k": 1}'}
    assert fill(template, values) == {
        "x": "1+2",
        "y": ["1", {"z": "{missing}"}],
        "n": 3,
        "j": '{"k": 1}',
    }


@pytest.mark.anyio
async def test_numbered_and_unmatched_optional_groups() -> None:
    provider = ScriptedProvider.from_rules(
        [{"match": r"add (\d+)(?: and (?P<more>\d+))?", "reply": "[{0}] [{1}] [{more}]"}]
    )
    response = await complete(provider, Message.user("please add 5"))
    assert response.message.content == "[add 5] [5] []"


# -- options validation ------------------------------------------------------


def test_options_validation() -> None:
    options = ScriptedOptions.model_validate(
        {"script": ["hi", {"tool_calls": [{"name": "t"}]}], "rules": [CALCULATOR_RULE]}
    )
    assert options.script[0].reply == "hi"
    assert options.model == "scripted"
    with pytest.raises(ValidationError, match="extra"):
        ScriptedOptions.model_validate({"scrpit": []})
    with pytest.raises(ValidationError, match="invalid regular expression"):
        ScriptedOptions.model_validate({"rules": [{"match": "(", "reply": "x"}]})
    with pytest.raises(ValidationError, match="needs a 'tool', a 'reply'"):
        ScriptedOptions.model_validate({"rules": [{"match": "x"}]})
    with pytest.raises(ValidationError, match="needs a 'reply', 'tool_calls'"):
        ScriptedOptions.model_validate({"script": [{}]})
    with pytest.raises(ValidationError):
        ScriptedOptions.model_validate({"on_exhausted": "loop"})


def test_every_option_field_is_described() -> None:
    from koboi_scripted.config import ScriptedToolCall, Turn

    for model in (ScriptedOptions, Turn, Rule, ScriptedToolCall):
        assert model.model_config.get("extra") == "forbid"
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


# -- usage and streaming -----------------------------------------------------


@pytest.mark.anyio
async def test_usage_is_deterministic_and_non_zero() -> None:
    provider = ScriptedProvider.from_turns(["two words", {"name": "t", "arguments": {"a": 1}}])
    r0 = await complete(provider, Message.user("three words here"))
    assert (r0.usage.input_tokens, r0.usage.output_tokens, r0.usage.requests) == (3, 2, 1)
    assert r0.model == "scripted"
    r1 = await complete(provider, Message.user("three words here"), r0.message)
    assert r1.usage.input_tokens == 5
    assert r1.usage.output_tokens > 0


@pytest.mark.anyio
async def test_stream_yields_word_deltas_that_join_to_the_content() -> None:
    content = "  The answer,\n is  42.  "
    provider = ScriptedProvider.from_turns([content])
    events = [event async for event in provider.stream(request(Message.user("q")))]
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 3
    assert "".join(d.text for d in deltas) == content
    assert isinstance(events[-1], ResponseDone)
    assert sum(isinstance(e, ResponseDone) for e in events) == 1
    assert events[-1].response.message.content == content


@pytest.mark.anyio
async def test_stream_of_tool_call_has_no_deltas() -> None:
    provider = ScriptedProvider.from_rules([CALCULATOR_RULE])
    events = [e async for e in provider.stream(request(Message.user("1 + 1")))]
    assert len(events) == 1
    assert isinstance(events[0], ResponseDone)
    assert events[0].response.message.tool_calls[0].arguments == {"expression": "1 + 1"}


@pytest.mark.anyio
async def test_requests_are_recorded() -> None:
    provider = ScriptedProvider.from_turns(["a"])
    req = request(Message.user("q"))
    await provider.complete(req)
    assert provider.requests == [req]


@pytest.mark.parametrize("text", ["", "one", "a b", " lead", "trail ", "tabs\tand\nlines"])
def test_split_words_round_trips(text: str) -> None:
    assert "".join(split_words(text)) == text
