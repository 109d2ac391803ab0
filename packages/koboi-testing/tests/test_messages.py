"""The wire-neutral message types: round trips, immutability, usage arithmetic."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError

from koboi.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseDone,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
)

CALL = ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris", "days": [1, 2]})
BAD_CALL = ToolCall(id="call_2", name="get_weather", raw_arguments='{"city": "Par')

SAMPLES: list[BaseModel] = [
    CALL,
    BAD_CALL,
    Message.system("Be brief."),
    Message.user("Wie ist das Wetter in Köln? 🌧"),
    Message.assistant("Checking.", tool_calls=(CALL, BAD_CALL)),
    Message.tool_result(CALL, "sunny"),
    Message.tool_result(BAD_CALL, "invalid JSON", is_error=True),
    Message(role="assistant", content="", provider_data={"thinking": [{"sig": "abc", "n": 1}]}),
    Usage(
        input_tokens=1,
        output_tokens=2,
        reasoning_tokens=3,
        cache_read_tokens=4,
        cache_write_tokens=5,
        requests=6,
    ),
    ModelResponse(
        message=Message.assistant("", tool_calls=(CALL,)),
        usage=Usage(input_tokens=9),
        finish_reason="tool_calls",
        model="m-1",
    ),
    ToolSpec(name="get_weather", description="Weather.", parameters={"type": "object"}),
    TextDelta(text="Hel"),
    ResponseDone(response=ModelResponse(message=Message.assistant("Hello"))),
]


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).__name__)
def test_round_trip_through_python_dump(value: BaseModel) -> None:
    assert type(value).model_validate(value.model_dump()) == value


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).__name__)
def test_round_trip_through_json(value: BaseModel) -> None:
    text = value.model_dump_json()
    json.loads(text)
    assert type(value).model_validate_json(text) == value


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).__name__)
def test_models_are_frozen(value: BaseModel) -> None:
    field = next(iter(type(value).model_fields))
    with pytest.raises(ValidationError):
        setattr(value, field, getattr(value, field))


@pytest.mark.parametrize(
    "model", [ToolCall, Message, Usage, ModelResponse, ToolSpec, TextDelta, ModelRequest]
)
def test_unknown_fields_are_refused(model: type[BaseModel]) -> None:
    with pytest.raises(ValidationError, match="surprise"):
        model.model_validate({"surprise": 1})


def test_request_round_trips_through_json() -> None:
    request = ModelRequest(
        messages=[Message.system("s"), Message.user("u"), Message.assistant("", (CALL,))],
        tools=[SAMPLES[10]],  # type: ignore[list-item]
        options={"temperature": 0.2},
        response_format={"type": "json_object"},
    )
    again = ModelRequest.model_validate_json(request.model_dump_json())
    assert list(again.messages) == list(request.messages)
    assert list(again.tools) == list(request.tools)
    assert again.options == request.options
    assert again.response_format == request.response_format


def test_stream_events_are_told_apart_by_kind() -> None:
    adapter: TypeAdapter[ModelStreamEvent] = TypeAdapter(ModelStreamEvent)
    events: list[ModelStreamEvent] = [
        TextDelta(text="Hel"),
        ResponseDone(response=ModelResponse(message=Message.assistant("Hello"))),
    ]
    for event in events:
        assert adapter.validate_json(adapter.dump_json(event)) == event
    assert isinstance(adapter.validate_python({"kind": "text_delta", "text": "x"}), TextDelta)


def test_message_helpers() -> None:
    result = Message.tool_result(CALL, "oops", is_error=True)
    assert (result.role, result.tool_call_id, result.name, result.is_error) == (
        "tool",
        "call_1",
        "get_weather",
        True,
    )
    assert Message.assistant().content == ""
    assert Message.user("x").tool_calls == ()


def test_invalid_role_is_refused() -> None:
    with pytest.raises(ValidationError):
        Message.model_validate({"role": "robot", "content": "beep"})


def test_usage_addition_sums_every_field() -> None:
    a = Usage(
        input_tokens=1,
        output_tokens=2,
        reasoning_tokens=3,
        cache_read_tokens=4,
        cache_write_tokens=5,
        requests=1,
    )
    b = Usage(
        input_tokens=10,
        output_tokens=20,
        reasoning_tokens=30,
        cache_read_tokens=40,
        cache_write_tokens=50,
        requests=2,
    )
    assert a + b == Usage(
        input_tokens=11,
        output_tokens=22,
        reasoning_tokens=33,
        cache_read_tokens=44,
        cache_write_tokens=55,
        requests=3,
    )
    assert (a + b).total_tokens == 33
    assert a + Usage() == a
    assert sum([a, b, a], Usage()) == Usage(
        input_tokens=12,
        output_tokens=24,
        reasoning_tokens=36,
        cache_read_tokens=48,
        cache_write_tokens=60,
        requests=4,
    )


_counts = st.integers(min_value=0, max_value=10**9)
_usages = st.builds(
    Usage,
    input_tokens=_counts,
    output_tokens=_counts,
    reasoning_tokens=_counts,
    cache_read_tokens=_counts,
    cache_write_tokens=_counts,
    requests=_counts,
)


@settings(max_examples=50, deadline=None)
@given(a=_usages, b=_usages, c=_usages)
def test_usage_addition_is_a_commutative_monoid(a: Usage, b: Usage, c: Usage) -> None:
    assert a + b == b + a
    assert (a + b) + c == a + (b + c)
    assert a + Usage() == a
    assert (a + b).total_tokens == a.total_tokens + b.total_tokens


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=10)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=50, deadline=None)
@given(arguments=st.dictionaries(st.text(max_size=8), _json, max_size=4), text=st.text())
def test_any_json_arguments_round_trip(arguments: dict[str, Any], text: str) -> None:
    message = Message.assistant(text, tool_calls=(ToolCall(id="c", name="t", arguments=arguments),))
    assert Message.model_validate_json(message.model_dump_json()) == message
