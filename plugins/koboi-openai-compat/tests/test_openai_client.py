"""The official ``openai`` Python client against a real ``koboi serve`` (scripted model,
offline): models, completions as JSON and as chunks, usage, governance, keys, sessions."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

# Real koboi serve processes, started once and shared; run in this member's own session
# (slow), with a generous timeout: a busy machine takes long to start them.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

ASK = [{"role": "user", "content": "What is 6 * 7?"}]


_opened: list[OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _opened:
        _opened.pop().close()


def client(served: Any, key: str | None = None) -> OpenAI:
    made = OpenAI(base_url=served.api, api_key=key or served.alice, max_retries=0, timeout=30)
    _opened.append(made)
    return made


def test_the_agent_is_the_one_model(governed: Any) -> None:
    models = client(governed).models.list()
    assert [m.id for m in models.data] == ["served"]
    assert models.data[0].owned_by == "koboi"
    assert client(governed).models.retrieve("served").id == "served"
    with pytest.raises(openai.NotFoundError) as caught:
        client(governed).models.retrieve("gpt-4o")
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["code"] == "model_not_found"
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "model"
    assert "gpt-4o" in error["message"] and "'served'" in error["message"]


def test_a_completion_names_an_unknown_model_404(governed: Any) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client(governed).chat.completions.create(model="gpt-4o-mini", messages=ASK)  # type: ignore[arg-type]
    assert caught.value.code == "model_not_found"


def test_non_streaming_runs_the_tool_on_the_server(governed: Any) -> None:
    raw = client(governed).chat.completions.with_raw_response.create(
        model="served",
        messages=ASK,  # type: ignore[arg-type]
    )
    answer = raw.parse()
    session_id = raw.headers["x-koboi-session"]
    assert answer.object == "chat.completion"
    assert answer.id == f"chatcmpl-{session_id}-1"
    choice = answer.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "6 * 7 = 42"
    assert choice.message.tool_calls is None  # ran on the server: nothing for the client to run
    assert choice.finish_reason == "stop"
    assert answer.usage is not None
    assert answer.usage.prompt_tokens > 0 and answer.usage.completion_tokens > 0
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
    extra = answer.model_extra or {}
    koboi = extra["koboi"]
    assert koboi["session_id"] == session_id
    assert koboi["outcome"] == "completed"
    [call] = koboi["tool_calls"]
    assert call["name"] == "calculator"
    assert call["arguments"] == {"expression": "6 * 7"}
    assert call["content"] == "42" and call["is_error"] is False
    # The same run is a koboi session of the caller, with its journal.
    session = httpx.get(
        f"{governed.api}/sessions/{session_id}",
        headers={"Authorization": f"Bearer {governed.alice}"},
    ).json()
    assert session["status"] == "completed" and session["runs"] == 1


def _chunks(stream: Iterator[object]) -> list[object]:
    return list(stream)


def test_streaming_sends_chunks_usage_and_done(governed: Any) -> None:
    stream = client(governed).chat.completions.create(
        model="served",
        messages=ASK,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "6 * 7 = 42"
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["stop"]
    # The usage chunk comes last, with no choices; the others carry usage null.
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])
    # The tool call ran on the server, reported as koboi's extension of the chunks.
    events = [(c.model_extra or {}).get("koboi") for c in chunks]
    activity = [e["event"] for e in events if e and "event" in e]
    assert activity == ["tool_call", "tool_result"]


def test_the_stream_ends_with_done_and_no_usage_unless_asked(governed: Any) -> None:
    body = {"model": "served", "messages": ASK, "stream": True}
    with httpx.stream(
        "POST",
        f"{governed.api}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {governed.alice}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_tool_that_needs_approval_is_denied_and_the_answer_says_so(governed: Any) -> None:
    answer = client(governed).chat.completions.create(
        model="served",
        messages=[{"role": "user", "content": "log hello"}],
    )
    content = answer.choices[0].message.content or ""
    assert content.startswith("logged: denied")
    assert "nobody can approve" in content
    [call] = (answer.model_extra or {})["koboi"]["tool_calls"]
    assert call["name"] == "append_log"
    assert call["is_error"] is True
    assert call["approval"]["approved"] is False
    assert "openai-compat.approvals: deny" in call["approval"]["reason"]
    # Nothing was written: the tool never ran.
    assert not list((governed.directory / "work").rglob("crash_demo.log"))
    # The journal keeps the decision, as koboi's own approval routes show it.
    sid = (answer.model_extra or {})["koboi"]["session_id"]
    approvals = httpx.get(
        f"{governed.api}/sessions/{sid}/approvals",
        headers={"Authorization": f"Bearer {governed.alice}"},
    ).json()["approvals"]
    assert [a["status"] for a in approvals] == ["denied"]


def test_streaming_denies_too(governed: Any) -> None:
    stream = client(governed).chat.completions.create(
        model="served",
        messages=[{"role": "user", "content": "log streamed"}],
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("logged: denied")
    events = [(c.model_extra or {}).get("koboi") or {} for c in chunks]
    results = [e["tool_call"] for e in events if e.get("event") == "tool_result"]
    assert [r["is_error"] for r in results] == [True]


def test_keys_are_enforced(governed: Any) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        client(governed, key="koboi_0000000000000000_wrong").chat.completions.create(
            model="served",
            messages=ASK,  # type: ignore[arg-type]
        )
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["type"] == "authentication_error" and body["code"] == "unauthorized"
    assert "param" in body
    # No key at all (the client needs one to start: send the request without it).
    anonymous = httpx.post(f"{governed.api}/chat/completions", json={"model": "served"})
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["type"] == "authentication_error"
    listed = httpx.get(f"{governed.api}/models")
    assert listed.status_code == 401
    assert set(listed.json()["error"]) >= {"message", "type", "param", "code"}


def test_another_principals_session_is_not_found(governed: Any) -> None:
    raw = client(governed).chat.completions.with_raw_response.create(
        model="served",
        messages=ASK,  # type: ignore[arg-type]
    )
    alices = raw.headers["x-koboi-session"]
    with pytest.raises(openai.NotFoundError) as caught:
        client(governed, key=governed.bob).chat.completions.create(
            model="served",
            messages=ASK,  # type: ignore[arg-type]
            extra_headers={"X-Koboi-Session": alices},
        )
    assert caught.value.code == "not_found"
    # Exactly as for a session that does not exist.
    with pytest.raises(openai.NotFoundError) as missing:
        client(governed, key=governed.bob).chat.completions.create(
            model="served",
            messages=ASK,  # type: ignore[arg-type]
            extra_headers={"X-Koboi-Session": "0" * 32},
        )
    assert missing.value.message.replace("0" * 32, alices) == caught.value.message


def test_the_user_field_names_a_durable_conversation(governed: Any) -> None:
    alice = client(governed)
    first = alice.chat.completions.with_raw_response.create(
        model="served",
        messages=[{"role": "user", "content": "remember apples"}],
        user="conversation-1",
    )
    sid = first.headers["x-koboi-session"]
    # The second request repeats the history, as OpenAI clients do: only its last message
    # is new, since the session's journal holds the rest.
    second = alice.chat.completions.with_raw_response.create(
        model="served",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "remember apples"},
            {"role": "assistant", "content": "I will remember apples."},
            {"role": "user", "content": "What is 1 + 1?"},
        ],
        user="conversation-1",
    )
    assert second.headers["x-koboi-session"] == sid
    assert second.parse().choices[0].message.content == "1 + 1 = 2"
    auth = {"Authorization": f"Bearer {governed.alice}"}
    with httpx.stream("GET", f"{governed.api}/sessions/{sid}/events", headers=auth) as response:
        inputs = [
            json.loads(line[6:])["input"]
            for line in response.iter_lines()
            if line.startswith("data: ") and '"input"' in line
        ]
    assert inputs == ["remember apples", "What is 1 + 1?"]
    # The same name for another principal is another conversation.
    bobs = client(governed, key=governed.bob).chat.completions.with_raw_response.create(
        model="served",
        messages=[{"role": "user", "content": "remember pears"}],
        user="conversation-1",
    )
    assert bobs.headers["x-koboi-session"] != sid
    # And X-Koboi-Session continues a session by id.
    third = alice.chat.completions.with_raw_response.create(
        model="served",
        messages=[{"role": "user", "content": "What is 2 + 2?"}],
        extra_headers={"X-Koboi-Session": sid},
    )
    assert third.headers["x-koboi-session"] == sid
    assert third.parse().id == f"chatcmpl-{sid}-{third.parse().id.rsplit('-', 1)[1]}"


def test_a_new_session_gets_the_earlier_messages_as_a_transcript(governed: Any) -> None:
    raw = client(governed).chat.completions.with_raw_response.create(
        model="served",
        messages=[
            {"role": "system", "content": "You add numbers."},
            {"role": "user", "content": [{"type": "text", "text": "What is 3 + 4?"}]},
        ],
    )
    assert raw.parse().choices[0].message.content == "3 + 4 = 7"
    sid = raw.headers["x-koboi-session"]
    auth = {"Authorization": f"Bearer {governed.alice}"}
    with httpx.stream("GET", f"{governed.api}/sessions/{sid}/events", headers=auth) as response:
        started = next(json.loads(line[6:]) for line in response.iter_lines() if '"input"' in line)
    assert started["input"].startswith("Conversation so far (sent by the client):\n[system] You")
    assert started["input"].endswith("Current message:\nWhat is 3 + 4?")


@pytest.mark.parametrize(
    ("extra", "param", "code"),
    [
        (
            {"tools": [{"type": "function", "function": {"name": "f"}}]},
            "tools",
            "unsupported_parameter",
        ),
        ({"n": 2}, "n", "unsupported_parameter"),
        ({"response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
    ],
)
def test_what_an_agent_cannot_honour_is_a_clear_400(
    governed: Any, extra: dict[str, object], param: str, code: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(governed).chat.completions.create(
            model="served",
            messages=ASK,  # type: ignore[arg-type]
            extra_body=extra,
        )
    assert caught.value.code == code
    body = caught.value.body
    assert isinstance(body, dict) and body["param"] == param
    assert body["type"] == "invalid_request_error"


def test_bad_requests_are_400_in_openai_shape(governed: Any) -> None:
    auth = {"Authorization": f"Bearer {governed.alice}", "content-type": "application/json"}
    url = f"{governed.api}/chat/completions"
    broken = httpx.post(url, content=b"{not json", headers=auth)
    assert broken.status_code == 400
    assert broken.json()["error"]["code"] == "invalid_json"
    last_is_assistant = httpx.post(
        url,
        json={"model": "served", "messages": [{"role": "assistant", "content": "hi"}]},
        headers=auth,
    )
    assert last_is_assistant.status_code == 400
    assert "last message must be the user's" in last_is_assistant.json()["error"]["message"]
    image = httpx.post(
        url,
        json={
            "model": "served",
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
            ],
        },
        headers=auth,
    )
    assert image.status_code == 400
    assert image.json()["error"]["param"] == "messages.0.content"
    missing = httpx.post(url, json={"messages": ASK}, headers=auth)
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "model"
    wrong_method = httpx.get(url, headers=auth)
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["type"] == "invalid_request_error"


def test_with_approvals_wait_a_decision_over_koboi_api_lets_the_tool_run(waiting: Any) -> None:
    """The stream announces the approval, someone approves it with koboi's own route, the
    tool runs (1.2 s: keepalives meanwhile) and the answer carries its result."""
    body = {
        "model": "served",
        "messages": [{"role": "user", "content": "log slowly"}],
        "stream": True,
    }
    auth = {"Authorization": f"Bearer {waiting.alice}"}
    lines: list[str] = []
    with httpx.stream(
        "POST", f"{waiting.api}/chat/completions", json=body, headers=auth, timeout=30
    ) as response:
        for line in response.iter_lines():
            if not line:
                continue
            lines.append(line)
            if '"event":"pending_approval"' in line:
                call = json.loads(line[6:])["koboi"]["tool_call"]
                approval_id = call["approval"]["approval_id"]
                decided = httpx.post(
                    f"{waiting.api}/approvals/{approval_id}",
                    json={"decision": "approve"},
                    headers=auth,
                )
                assert decided.status_code == 200, decided.text
    events = [
        json.loads(line[6:]).get("koboi", {}).get("event")
        for line in lines
        if line.startswith("data: {")
    ]
    assert [e for e in events if e] == [
        "pending_approval",
        "approval_decided",
        "tool_call",
        "tool_result",
    ]
    started = next(i for i, line in enumerate(lines) if '"event":"tool_call"' in line)
    finished = next(i for i, line in enumerate(lines) if '"event":"tool_result"' in line)
    assert ": keepalive" in lines[started:finished]  # the 1.2 s call, keepalives every 0.3 s
    assert lines[-1] == "data: [DONE]"
    text = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in lines
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    )
    assert text.startswith("logged: ") and "denied" not in text
    [log] = (waiting.directory / "work").rglob("crash_demo.log")  # the tool did write
    assert log.read_text() == "slowly\n"


def test_a_client_that_goes_away_leaves_the_run_to_finish(governed: Any) -> None:
    auth = {"Authorization": f"Bearer {governed.alice}"}
    body = {"model": "served", "messages": [{"role": "user", "content": "What is 5 + 5?"}]}
    with httpx.stream(
        "POST",
        f"{governed.api}/chat/completions",
        json={**body, "stream": True},
        headers=auth,
        timeout=30,
    ) as response:
        sid = response.headers["x-koboi-session"]
        next(response.iter_lines())  # the first chunk, then the client leaves
    deadline = time.monotonic() + 30
    while (
        status := httpx.get(f"{governed.api}/sessions/{sid}", headers=auth).json()["status"]
    ) != "completed" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status == "completed"
    # The session goes on: the next message continues it.
    again = client(governed).chat.completions.with_raw_response.create(
        model="served",
        messages=[{"role": "user", "content": "What is 6 + 6?"}],
        extra_headers={"X-Koboi-Session": sid},
    )
    assert again.parse().choices[0].message.content == "6 + 6 = 12"
