"""The section's three spellings, its errors, and the reading of a hook's answer (no process)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koboi import PluginHost, validate_config
from koboi.errors import ConfigError
from koboi.sandbox import ProcessResult
from koboi_hooks.contract import from_output, from_process
from koboi_hooks.settings import HooksSettings


def _validate(host: PluginHost, hooks: Any) -> HooksSettings:
    config = validate_config({"llm": {"provider": "scripted"}, "hooks": hooks}, host.catalog())
    section = config.section("hooks")
    assert isinstance(section, HooksSettings)
    return section


def _problem(host: PluginHost, hooks: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        validate_config({"llm": {"provider": "scripted"}, "hooks": hooks}, host.catalog())
    return str(caught.value)


def test_three_spellings_give_the_same_hooks(host: PluginHost) -> None:
    own = _validate(host, {"before_tool_call": [{"matcher": "run_shell", "command": "a"}]})
    contract = _validate(
        host,
        {"PreToolUse": [{"matcher": "run_shell", "hooks": [{"type": "command", "command": "a"}]}]},
    )
    agent = _validate(
        host,
        {
            "allow_exec": True,
            "command_timeout": 10,
            "on_event": [{"command": "a", "events": ["pre_tool_use"], "matcher": "run_shell"}],
        },
    )
    for settings in (own, contract, agent):
        hooks = settings.by_event()["before_tool_call"]
        assert [(h.matcher, h.command) for h in hooks] == [("run_shell", "a")]


def test_agent_keys_map_or_say_why_not(host: PluginHost) -> None:
    mapped = _validate(
        host,
        {
            "on_event": [
                {"command": "a", "events": ["session_end"], "abort_on_error": True, "priority": 5}
            ]
        },
    )
    hook = mapped.by_event()["run_end"][0]
    assert hook.on_error == "closed" and hook.priority == 5
    assert "env_passthrough: True is not supported" in _problem(
        host, {"on_event": [{"command": "a", "events": ["pre_input"], "env_passthrough": True}]}
    )
    assert "has no command hook in koboi" in _problem(
        host, {"on_event": [{"command": "a", "events": ["pre_llm_call"]}]}
    )
    assert "allow_exec is false" in _problem(
        host, {"allow_exec": False, "user_prompt": [{"command": "a"}]}
    )


@pytest.mark.parametrize(
    ("hooks", "problem"),
    [
        ({"Teardown": []}, "unknown hook event 'Teardown'"),
        (
            {"user_prompt": [{"command": "a", "matcher": "x"}]},
            "'matcher' applies to tool events only",
        ),
        ({"user_prompt": [{"command": "a", "url": "http://x.test"}]}, "exactly one"),
        ({"user_prompt": [{}]}, "exactly one"),
        ({"run_end": [{"url": "ftp://x.test/"}]}, "only http:// and https://"),
        ({"run_end": [{"url": "http://u:p@x.test/"}]}, "user:password@ is not sent"),
        ({"run_end": [{"url": "http://x.test", "secret": "plain"}]}, "whsec_"),
        ({"before_tool_call": [{"command": "a", "matcher": "("}]}, "not a regular expression"),
        ({"user_prompt": [{"command": "a", "cwd": "../up"}]}, "cwd"),
        ({"user_prompt": [{"command": "a", "timeout": 0}]}, "timeout"),
        ({"url_allow": ["10.0.0.1/8"]}, "url_allow"),
    ],
)
def test_bad_sections_are_one_clear_line_each(host: PluginHost, hooks: Any, problem: str) -> None:
    assert problem in _problem(host, hooks)


def test_a_secret_never_appears_in_the_error(host: PluginHost) -> None:
    message = _problem(host, {"run_end": [{"url": "http://x.test", "secret": "whsec_short"}]})
    assert "short" not in message.split("secret:")[-1].replace("whsec_<base64", "")


def test_a_url_hook_is_named_by_its_host_only(host: PluginHost) -> None:
    settings = _validate(host, {"run_end": [{"url": "https://chat.example/services/T0/B0/s3cr3t"}]})
    assert settings.by_event()["run_end"][0].label() == "https://chat.example/..."


def test_the_default_failure_rule_is_closed_for_tool_calls_only(host: PluginHost) -> None:
    settings = _validate(
        host, {"before_tool_call": [{"command": "a"}], "user_prompt": [{"command": "b"}]}
    )
    hooks = settings.by_event()
    assert settings.fail_rule("before_tool_call", hooks["before_tool_call"][0]) == "closed"
    assert settings.fail_rule("user_prompt", hooks["user_prompt"][0]) == "open"


def _done(code: int | None, out: str = "", err: str = "", **flags: bool) -> ProcessResult:
    return ProcessResult(code, out, err, **flags)


def test_exit_codes_by_the_contract() -> None:
    assert from_process("before_tool_call", _done(0), 5).action == "none"
    blocked = from_process("before_tool_call", _done(2, '{"decision": "allow"}', "no\n"), 5)
    assert blocked.action == "block" and blocked.reason == "no"  # stdout ignored on exit 2
    assert "exited with code 1" in from_process("user_prompt", _done(1, "", "boom"), 5).error
    assert "killed by signal 9" in from_process("user_prompt", _done(-9), 5).error
    assert (
        "timed out after 5 s" in from_process("user_prompt", _done(None, timed_out=True), 5).error
    )
    assert "max_output" in from_process("user_prompt", _done(0, "x", truncated=True), 5).error


@pytest.mark.parametrize(
    ("event", "text", "expected"),
    [
        ("before_tool_call", '{"decision": "approve"}', {"action": "allow"}),
        (
            "before_tool_call",
            '{"decision": "deny", "reason": "r"}',
            {"action": "block", "reason": "r"},
        ),
        (
            "before_tool_call",
            '{"hookSpecificOutput": {"permissionDecision": "ask"}}',
            {"action": "ask"},
        ),
        (
            "user_prompt",
            '{"continue": false, "stopReason": "stop"}',
            {"action": "block", "reason": "stop"},
        ),
        ("user_prompt", "plain context", {"context": "plain context"}),
        (
            "after_tool_call",
            '{"additionalContext": "a", "hookSpecificOutput": {"additionalContext": "b"}}',
            {"context": "a\n\nb"},
        ),
        (
            "before_finish",
            '{"decision": "block", "reason": "more"}',
            {"action": "block", "reason": "more"},
        ),
        ("user_prompt", '{"decision": "ask"}', {"action": "none"}),
    ],
)
def test_what_a_hook_prints(event: str, text: str, expected: dict[str, Any]) -> None:
    outcome = from_output(event, text)
    assert not outcome.failed, outcome.error
    for key, value in expected.items():
        assert getattr(outcome, key) == value


@pytest.mark.parametrize(
    ("event", "text", "error"),
    [
        ("before_tool_call", "ok", "not a JSON object"),
        ("user_prompt", "{oops", "invalid JSON"),
        ("user_prompt", "[1, 2]", "not an object"),
        ("before_tool_call", '{"decision": "maybe"}', "unknown decision"),
        ("before_tool_call", '{"updatedInput": "x"}', "must be an object"),
        ("before_tool_call", '{"reason": 3}', "must be text"),
        ("before_tool_call", '{"continue": "no"}', "'continue' must be true or false"),
    ],
)
def test_garbage_is_an_error_that_says_what(event: str, text: str, error: str) -> None:
    assert error in from_output(event, text).error


@given(st.text(max_size=200))
def test_any_output_is_read_without_raising(text: str) -> None:
    for event in ("before_tool_call", "user_prompt", "after_tool_call", "before_finish"):
        outcome = from_output(event, text)
        assert outcome.action in ("none", "allow", "block", "ask")
