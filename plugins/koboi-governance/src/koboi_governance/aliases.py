"""koboi-agent's top-level ``guardrails``, ``rate_limit`` and ``policy`` sections, as
fragments of the ``governance`` section (registered as its aliases).

Each converter takes the alias's raw value and returns what it means in
``governance``; the kernel merges that in before the section is validated, and
``koboi validate --suggest`` prints it. Keys that have no counterpart here are a
``ValueError`` naming the key and what to write instead, never silently dropped.
Only pydantic-free code: a config is converted before anything is validated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: koboi-agent's policy actions -> koboi's.
_ACTIONS = {"allow": "allow", "confirm": "ask", "ask": "ask", "deny": "deny"}


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be a mapping")
    return value


def _refuse(where: str, key: str, instead: str) -> ValueError:
    return ValueError(f"{where}.{key}: has no counterpart in koboi; {instead}")


def _rate_limit(value: Any, where: str) -> dict[str, Any]:
    """``{max_calls_per_session, max_calls_per_minute, rate_window_seconds}`` -> the
    ``'*'`` entry of ``governance.rate_limits`` (every tool without its own entry)."""
    limit: dict[str, Any] = {}
    for key, item in _mapping(value, where).items():
        if key == "max_calls_per_session":
            limit["per_session"] = item
        elif key == "max_calls_per_minute":
            limit["per_minute"] = item
        elif key == "rate_window_seconds":
            if item != 60:
                raise _refuse(where, key, "koboi counts calls per minute (write 60, or drop it)")
        else:
            raise _refuse(where, key, "write per-tool limits as governance.rate_limits")
    return {"rate_limits": {"*": limit}} if limit else {}


def _checks(value: Any, where: str, keys: str) -> Mapping[str, Any]:
    """``guardrails.input`` / ``.output`` as a mapping; koboi-agent's list of named
    guardrails has no counterpart."""
    if isinstance(value, list):
        raise ValueError(
            f"{where}: a list of named guardrails has no counterpart in koboi; write "
            f"governance.guardrails.{where} ({keys})"
        )
    return _mapping(value, where)


def _input(value: Any) -> dict[str, Any]:
    where = "input"
    found: dict[str, Any] = {}
    for key, item in _checks(value, where, "max_chars, deny_patterns, injection").items():
        if key == "max_length":
            found["max_chars"] = item
        elif key == "custom_patterns":
            found["deny_patterns"] = item
        elif key == "detect_injection":
            # koboi checks injections by default (warn); asking for detection blocks.
            if item:
                found["injection"] = "block"
        elif key == "deflection_text":
            raise _refuse(where, key, "a refused message ends the run with the guardrail's reason")
        else:
            raise _refuse(where, key, "see governance.guardrails.input in koboi config schema")
    return found


def _output(value: Any) -> dict[str, Any]:
    where = "output"
    found: dict[str, Any] = {}
    for key, item in _checks(value, where, "secrets, pii, injection").items():
        if key == "detect_sensitive":
            if item:  # mask secrets and personal data in results and answers
                found.update(secrets="warn", pii="warn")
        else:
            raise _refuse(where, key, "see governance.guardrails.output in koboi config schema")
    return found


def guardrails(value: Any) -> dict[str, Any]:
    """koboi-agent's ``guardrails`` section as a fragment of ``governance``."""
    fragment: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    for key, item in _mapping(value, "guardrails").items():
        if key == "input":
            if found := _input(item):
                checks["input"] = found
        elif key == "output":
            if found := _output(item):
                checks["output"] = found
        elif key == "rate_limit":
            fragment.update(_rate_limit(item, "rate_limit"))
        elif key == "audit":
            raise _refuse(
                "guardrails", key, "every decision is in the audit trail (koboi audit SESSION)"
            )
        elif key == "approval":
            raise _refuse(
                "guardrails",
                key,
                "write agent.approval_risk / agent.approval_timeout_seconds, and governance.trust",
            )
        else:
            raise _refuse("guardrails", key, "see governance.guardrails in koboi config schema")
    if checks:
        fragment["guardrails"] = checks
    return fragment


def rate_limit(value: Any) -> dict[str, Any]:
    """koboi-agent's top-level ``rate_limit`` as a fragment of ``governance``."""
    return _rate_limit(value, "rate_limit")


def policy(value: Any) -> dict[str, Any]:
    """koboi-agent's ``policy`` section (``rules`` of tool globs, ``confirm`` for ask,
    ``argument_patterns``) as a fragment of ``governance``."""
    section = _mapping(value, "policy")
    rules: list[dict[str, Any]] = []
    for key, item in section.items():
        if key == "rules":
            if not isinstance(item, list):
                raise ValueError("policy.rules: must be a list of rules")
            rules = [_rule(index, rule) for index, rule in enumerate(item)]
        elif key == "allow_interpreter_exec":
            if item:
                raise _refuse(
                    "policy",
                    key,
                    "allow the interpreters you need with a rule: {tool: run_shell, "
                    "command: 'python3 *', action: allow}",
                )
        elif key == "audit_log":
            raise _refuse("policy", key, "every decision is in the audit trail (koboi audit)")
        else:
            raise _refuse("policy", key, "see governance.policy in koboi config schema")
    return {"policy": {"rules": rules}} if rules else {}


def _rule(index: int, value: Any) -> dict[str, Any]:
    where = f"policy.rules[{index}]"
    rule: dict[str, Any] = {}
    for key, item in _mapping(value, where).items():
        if key == "tool":
            rule["tool"] = item
        elif key == "action":
            action = _ACTIONS.get(str(item))
            if action is None:
                raise ValueError(f"{where}.action: {item!r} is not allow, confirm or deny")
            rule["action"] = action
        elif key == "argument_patterns":
            rule["args"] = dict(_mapping(item, f"{where}.argument_patterns"))
        elif key == "pattern":
            if item:
                raise _refuse(where, key, "match arguments with args, shell commands with command")
        else:
            raise _refuse(where, key, "see governance.policy.rules in koboi config schema")
    rule.setdefault("tool", "*")
    return rule
