"""The request koboi accepts, and how its messages become the agent's input (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from koboi_openai_compat.shapes import ToolActivity, read_frame, usage_of
from koboi_openai_compat.wire import new_input, openai_body, openai_error, parse_request
from koboi_server.errors import ApiError
from koboi_server.sse import frame


def _request(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "served", "messages": list(messages), **extra}


USER = {"role": "user", "content": "What is 1 + 1?"}


def test_only_the_last_message_is_new_in_a_session_that_exists() -> None:
    request = parse_request(
        _request(
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}, USER
        )
    )
    assert new_input(request, continuing=True) == "What is 1 + 1?"


def test_a_new_session_gets_the_earlier_messages_first() -> None:
    request = parse_request(
        _request(
            {"role": "system", "content": "Be brief."},
            {"role": "assistant", "content": None},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
            USER,
        )
    )
    assert new_input(request, continuing=False) == (
        "Conversation so far (sent by the client):\n"
        "[system] Be brief.\n"
        "[assistant] Hello.\n"
        "\n"
        "Current message:\n"
        "What is 1 + 1?"
    )
    assert new_input(parse_request(_request(USER)), continuing=False) == "What is 1 + 1?"


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ([], None, "JSON object"),
        ({"messages": [USER]}, "model", "model"),
        (_request(), "messages", "at least 1"),
        (_request({"role": "wizard", "content": "x"}), "messages.0.role", "not one of"),
        (_request({"role": "assistant", "content": "x"}), "messages", "last message"),
        (_request({"role": "user", "content": "  "}), "messages", "last message"),
        (_request(USER, tools=[{"type": "function"}]), "tools", "client-side tools"),
        (_request(USER, functions=[{"name": "f"}]), "tools", "client-side tools"),
        (_request(USER, n=3), "n", "one choice"),
        (_request(USER, logprobs=True), "logprobs", "not available"),
        (_request(USER, response_format={"type": "json_schema"}), "response_format", "only"),
        (_request(USER, modalities=["text", "audio"]), "modalities", "only text"),
        (
            _request({"role": "user", "content": [{"type": "input_audio"}]}),
            "messages.0.content",
            "only text parts",
        ),
        (_request(USER, user="x" * 300), "user", "at most 256"),
    ],
)
def test_what_cannot_be_honoured_is_a_400_naming_the_parameter(
    body: Any, param: str | None, says: str
) -> None:
    with pytest.raises(ApiError) as caught:
        parse_request(body)
    error = openai_body(caught.value)["error"]
    assert caught.value.status == 400
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert says in error["message"]


def test_sampling_parameters_are_accepted_and_ignored() -> None:
    request = parse_request(
        _request(USER, temperature=0.2, max_tokens=10, top_p=1, seed=3, stop=["x"], n=1)
    )
    assert new_input(request, continuing=False) == "What is 1 + 1?"


def test_errors_have_openais_shape_with_koboi_fields_beside() -> None:
    body = openai_body(openai_error(404, "not_found", "no session 'x'", session_id="x"))
    assert body == {
        "error": {
            "message": "no session 'x'",
            "type": "invalid_request_error",
            "param": None,
            "code": "not_found",
            "session_id": "x",
        }
    }
    throttled = openai_body(ApiError(429, "too_many_runs", "busy", headers={"Retry-After": "1"}))
    assert throttled["error"]["type"] == "rate_limit_error"
    assert openai_body(ApiError(503, "draining", "bye"))["error"]["type"] == "server_error"
    assert openai_body(ApiError(401, "unauthorized", "no"))["error"]["type"] == (
        "authentication_error"
    )


def test_usage_maps_to_openais_fields() -> None:
    assert usage_of(
        {"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 4, "reasoning_tokens": 2}
    ) == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    assert usage_of(None)["total_tokens"] == 0


def test_koboi_frames_read_back() -> None:
    assert read_frame(frame("step", {"step": 1, "text": "a\\nb"}, 3)) == (
        "step",
        {"step": 1, "text": "a\\nb"},
    )
    assert read_frame(b": keepalive\n\n") == "keepalive"
    assert read_frame(b"retry: 2000\n\n") is None


def test_tool_activity_follows_a_denied_call() -> None:
    tools = ToolActivity()
    tools.see("step", {"tool_calls": [{"id": "c1", "name": "append_log", "arguments": {"x": 1}}]})
    tools.see("pending_approval", {"call_id": "c1", "approval_id": "ap_1"})
    tools.see("approval_decided", {"call_id": "c1", "approved": False, "reason": "no"})
    tools.see("tool_result", {"call_id": "c1", "content": "denied", "is_error": True})
    assert tools.see("tool_result", {"call_id": "unknown"}) is None
    assert tools.listed() == [
        {
            "id": "c1",
            "name": "append_log",
            "arguments": {"x": 1},
            "approval": {"approved": False, "reason": "no", "decided_by": None},
            "content": "denied",
            "is_error": True,
            "refused_by": None,
        }
    ]
