"""Masking secrets before the CLI shows journal events (``koboi show``).

The journal keeps what tools were called with (after the governance redaction);
the CLI never prints that verbatim. Two rules, applied together, both the
kernel's one definition of a secret (:mod:`koboi.secrets`):

- by key: in tool arguments, any key that names a secret (``api_key``,
  ``Authorization``, ``password``, ``session_token``...) has its value replaced
  by ``***``, however deeply nested;
- by value: in every string shown (arguments, results, answers, errors),
  things that look like credentials are masked: ``Bearer``/``Basic`` tokens,
  well-known key formats (``sk-...``, ``ghp_...``, ``AKIA...``, JWTs),
  ``password=...``-style pairs, and long random-looking tokens.

Key-based masking applies only to tool arguments: elsewhere in event data
keys are the kernel's own (``input_tokens`` is a count, not a secret).
Masking errs on the side of hiding too much.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from koboi.secrets import is_secret_name
from koboi.secrets import mask_secrets as _mask

MASK = "***"


def is_sensitive_key(name: str) -> bool:
    """True when an argument named ``name`` holds a secret (``api_key``, ``Authorization``...):
    the kernel's one rule, :func:`koboi.secrets.is_secret_name`."""
    return is_secret_name(name)


def mask_secrets(text: str) -> str:
    """``text`` with everything that looks like a credential replaced by ``***``: the
    kernel's detectors (:func:`koboi.secrets.mask_secrets`), random-looking tokens
    included, since this is what a person sees."""
    return _mask(text, suspects=True)


def redact_arguments(value: Any) -> Any:
    """Tool arguments with secret-named keys set to ``***`` and secret-looking strings masked.

    Returns a new structure; ``value`` is not changed.
    """
    if isinstance(value, Mapping):
        return {
            key: MASK if is_sensitive_key(str(key)) else redact_arguments(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_arguments(item) for item in value]
    if isinstance(value, str):
        return mask_secrets(value)
    return value


def redact_raw_arguments(raw: str) -> str:
    """A tool call's raw JSON arguments, redacted (as compact JSON when they parse)."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return mask_secrets(raw)
    return json.dumps(redact_arguments(parsed), ensure_ascii=False, separators=(",", ":"))


def mask_strings(value: Any) -> Any:
    """Every string in ``value`` passed through :func:`mask_secrets`; keys kept as they are."""
    if isinstance(value, Mapping):
        return {key: mask_strings(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [mask_strings(item) for item in value]
    if isinstance(value, str):
        return mask_secrets(value)
    return value


def redact_event_data(event_type: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """A journal event's data, safe to show: tool arguments redacted by key and value,
    every other string masked by value."""
    from koboi import journal as J  # here: importing the CLI stays cheap

    redacted: dict[str, Any] = {}
    for key, item in data.items():
        if key == "arguments" and event_type == J.TOOL_CALL_STARTED:
            redacted[key] = redact_arguments(item)
        elif key == "call" and event_type == J.RUN_STARTED and isinstance(item, Mapping):
            # A direct tool call (agent.call_tool): its arguments, as for tool_call_started.
            redacted[key] = _redact_call(item)
        elif key == "response" and isinstance(item, Mapping):
            redacted[key] = _redact_response(item)
        else:
            redacted[key] = mask_strings(item)
    return redacted


def _redact_response(response: Mapping[str, Any]) -> dict[str, Any]:
    """A dumped ModelResponse, its tool calls' arguments redacted."""
    result: dict[str, Any] = mask_strings(response)
    message = result.get("message")
    if isinstance(message, dict):
        calls = response.get("message", {}).get("tool_calls") or []
        message["tool_calls"] = [_redact_call(call) for call in calls]
    return result


def _redact_call(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return mask_strings(call)
    redacted = dict(mask_strings(call))
    if "arguments" in call:
        redacted["arguments"] = redact_arguments(call["arguments"])
    if isinstance(call.get("raw_arguments"), str):
        redacted["raw_arguments"] = redact_raw_arguments(call["raw_arguments"])
    return redacted
