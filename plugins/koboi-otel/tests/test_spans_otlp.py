"""A scripted run with a tool call and a sub-agent, exported over OTLP to a real receiver on
loopback: span names, parent links and attributes follow the GenAI conventions, and the
canary secret of the tool's argument is in no span, no metric label and no log line."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from otel_kit import CANARY, MESSAGE, QUESTION, agent_config, ask_helper
from otlp_receiver import GRPCReceiver, HTTPReceiver, Received, ReceivedSpan

from koboi import KoboiAgent
from koboi.tracing import TraceContext

# OTLP receivers on loopback (real servers): once, in this member's own session.
pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.usefixtures("fresh_pipelines")]

SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT = 1, 3


def telemetry(endpoint: str, **more: Any) -> dict[str, Any]:
    return {
        "endpoint": endpoint,
        "service_name": "otel-test",
        "metric_interval_seconds": 3600,  # exported by the flush at the end
        **more,
    }


async def run_once(config: dict[str, Any], trace: TraceContext | None = None) -> Any:
    from koboi_otel.exporting import shutdown_all

    async with KoboiAgent.from_dict(config, extra_tools=[ask_helper]) as agent:
        result = await agent.run(MESSAGE, trace=trace)
    shutdown_all()  # exports everything, while the receiver listens
    return result


def by_name(received: Received) -> dict[str, list[ReceivedSpan]]:
    found: dict[str, list[ReceivedSpan]] = {}
    for span in received.spans:
        found.setdefault(span.name, []).append(span)
    return found


def everything_exported(received: Received) -> bytes:
    return b"".join(received.raw)


async def test_a_run_with_a_tool_and_a_sub_agent_follows_the_conventions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with HTTPReceiver() as receiver:
        result = await run_once(agent_config(telemetry(receiver.endpoint)))
        assert result.outcome == "completed", result.error
        assert result.output == "The helper says: 6 * 7 = 42"
        received = receiver.received
        received.wait_for(lambda r: len(r.spans) >= 7)

    names = by_name(received)
    (parent_run,) = [s for s in names["invoke_agent otel-demo"] if not s.parent_span_id]
    (child_run,) = names["invoke_agent helper"]
    (delegate,) = names["execute_tool ask_helper"]
    (calculator,) = names["execute_tool calculator"]
    chats = names["chat scripted-1"]
    assert len(chats) == 4  # two model calls of the parent, two of the helper

    # One trace; the kernel started it, so the run's span is its root with the same ids.
    assert {s.trace_id for s in received.spans} == {parent_run.trace_id}
    assert parent_run.attributes["gen_ai.conversation.id"] == result.session_id
    # Parent links: run > chat, run > tool > sub-agent run > chat, sub-agent > tool.
    parent_chats = [c for c in chats if c.parent_span_id == parent_run.span_id]
    child_chats = [c for c in chats if c.parent_span_id == child_run.span_id]
    assert len(parent_chats) == 2 and len(child_chats) == 2
    assert delegate.parent_span_id == parent_run.span_id
    assert child_run.parent_span_id == delegate.span_id
    assert calculator.parent_span_id == child_run.span_id

    # Attributes of the conventions.
    assert parent_run.kind == SPAN_KIND_INTERNAL
    assert parent_run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert parent_run.attributes["gen_ai.agent.name"] == "otel-demo"
    assert parent_run.attributes["gen_ai.provider.name"] == "scripted"
    assert parent_run.attributes["koboi.run.outcome"] == "completed"
    assert parent_run.attributes["gen_ai.usage.input_tokens"] > 0
    chat = parent_chats[0]
    assert chat.kind == SPAN_KIND_CLIENT
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "scripted-1"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert chat.attributes["gen_ai.usage.output_tokens"] >= 0
    assert delegate.attributes["gen_ai.operation.name"] == "execute_tool"
    assert delegate.attributes["gen_ai.tool.name"] == "ask_helper"
    assert delegate.attributes["gen_ai.tool.call.id"]
    assert delegate.attributes["koboi.tool.verdict"] == "allow"
    assert delegate.attributes["koboi.tool.outcome"] == "ok"
    assert delegate.attributes["koboi.tool.risk"] == "safe"
    # Contents are off by default: no argument, message or result on any span.
    for span in received.spans:
        assert not any(
            k.startswith(
                ("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.a", "gen_ai.tool.call.r")
            )
            for k in span.attributes
        ), span
    assert QUESTION.encode() not in everything_exported(received)
    assert CANARY.encode() not in everything_exported(received)

    # Metrics: tokens, durations, runs by outcome, tool calls by verdict; labels are names.
    runs = received.metric_points("koboi.runs")
    assert {(labels["gen_ai.agent.name"], labels["koboi.run.outcome"]) for labels, _ in runs} == {
        ("otel-demo", "completed"),
        ("helper", "completed"),
    }
    tools = {
        labels["gen_ai.tool.name"]: labels
        for labels, _ in received.metric_points("koboi.tool.calls")
    }
    assert tools["ask_helper"]["koboi.tool.verdict"] == "allow"
    tokens = received.metric_points("gen_ai.client.token.usage")
    assert {labels["gen_ai.token.type"] for labels, _ in tokens} == {"input", "output"}
    assert received.metric_points("gen_ai.client.operation.duration")
    for _labels, _point in [*runs, *tokens]:
        assert CANARY not in repr(_labels)
    assert CANARY not in caplog.text


async def test_with_contents_on_the_arguments_show_with_the_secret_masked() -> None:
    with HTTPReceiver() as receiver:
        result = await run_once(agent_config(telemetry(receiver.endpoint, capture_content=True)))
        assert result.outcome == "completed"
        received = receiver.received
        received.wait_for(lambda r: any(s.name == "execute_tool ask_helper" for s in r.spans))
    (delegate,) = by_name(received)["execute_tool ask_helper"]
    arguments = delegate.attributes["gen_ai.tool.call.arguments"]
    # The positive control: the argument's non-secret part is there...
    assert QUESTION in arguments
    assert "token " in arguments
    assert delegate.attributes["gen_ai.tool.call.result"] == "6 * 7 = 42"
    chats = [s for s in received.spans if s.name.startswith("chat ")]
    assert any(QUESTION in str(s.attributes.get("gen_ai.input.messages", "")) for s in chats)
    assert any("gen_ai.output.messages" in s.attributes for s in chats)
    # ... and the secret is nowhere in anything exported.
    assert CANARY.encode() not in everything_exported(received)


async def test_a_run_joins_the_trace_its_caller_gave() -> None:
    caller = TraceContext.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert caller is not None
    with HTTPReceiver() as receiver:
        await run_once(agent_config(telemetry(receiver.endpoint)), trace=caller)
        received = receiver.received
        received.wait_for(lambda r: any(s.name == "invoke_agent otel-demo" for s in r.spans))
    (run_span,) = by_name(received)["invoke_agent otel-demo"]
    assert run_span.trace_id == caller.trace_id
    assert run_span.parent_span_id == caller.span_id


async def test_grpc_export_reaches_a_grpc_receiver() -> None:
    with GRPCReceiver() as receiver:
        config = agent_config(telemetry(receiver.endpoint, protocol="grpc"))
        result = await run_once(config)
        assert result.outcome == "completed"
        received = receiver.received
        received.wait_for(lambda r: any(s.name == "invoke_agent otel-demo" for s in r.spans))
        received.wait_for(lambda r: bool(r.metric_points("koboi.runs")))
    assert {s.name for s in received.spans} >= {"invoke_agent otel-demo", "execute_tool calculator"}
    assert received.resources[0]["service.name"] == "otel-test"


async def test_a_refused_call_is_a_span_with_the_stage_that_refused_it() -> None:
    """The governance verdict on the spans: a policy denies the calculator (the helper's
    call is refused), and allows ask_helper (its span names the stage that allowed it)."""
    config = agent_config(None)
    config["governance"] = {
        "policy": {
            "rules": [
                {"tool": "ask_helper", "action": "allow"},
                {"tool": "calculator", "action": "deny", "reason": "no arithmetic today"},
            ]
        }
    }
    with HTTPReceiver() as receiver:
        config["telemetry"] = telemetry(receiver.endpoint)
        result = await run_once(config)
        assert result.outcome == "completed"
        received = receiver.received
        received.wait_for(lambda r: any(s.name == "execute_tool calculator" for s in r.spans))
    names = by_name(received)
    (refused,) = names["execute_tool calculator"]
    assert refused.attributes["koboi.tool.verdict"] == "deny"
    assert refused.attributes["koboi.tool.refused_by"] == "policy"
    assert refused.attributes["error.type"] == "refused"
    assert refused.status_code == 2  # ERROR
    assert "no arithmetic today" in refused.status_message
    (allowed,) = names["execute_tool ask_helper"]
    assert "policy:allow" in allowed.attributes["koboi.tool.decision"]
    denied = [
        labels
        for labels, _ in received.metric_points("koboi.tool.calls")
        if labels["koboi.tool.verdict"] == "deny"
    ]
    assert denied == [
        {
            "gen_ai.tool.name": "calculator",
            "koboi.tool.verdict": "deny",
            "koboi.tool.outcome": "refused",
            "gen_ai.agent.name": "helper",
            "koboi.tool.refused_by": "policy",
        }
    ]
