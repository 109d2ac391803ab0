"""Masking secrets before the CLI shows journal events (``koboi show``).

The journal keeps exactly what tools were called with; the CLI never prints
that verbatim. Two rules, applied together:

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
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

SENSITIVE_KEY = re.compile(
    r"key|token|secret|password|passwd|authorization|api[-_]?key|cookie|credential",
    re.IGNORECASE,
)

# Credentials recognisable by their shape. Order matters: "Bearer <token>" is
# masked as a whole before the key=value rule looks at "Authorization: ...".
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # HTTP auth schemes: keep the scheme, hide the credential.
    (re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{6,}", re.IGNORECASE), r"\1 " + MASK),
    # Well-known key formats (OpenAI/Anthropic/Stripe, GitHub, Slack, AWS, Google).
    (
        re.compile(
            r"\b(?:sk|rk|pk)[-_][A-Za-z0-9_-]{8,}"
            r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
            r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
            r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"
            r"|\bAKIA[0-9A-Z]{16}\b"
            r"|\bAIza[0-9A-Za-z_-]{30,}"
        ),
        MASK,
    ),
    # JSON web tokens.
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), MASK),
    # key=value / "key": "value" / Key: value pairs whose key names a secret.
    (
        re.compile(
            r"(?P<key>[A-Za-z0-9_.-]*(?:key|token|secret|password|passwd|authorization"
            r"|cookie|credential)[A-Za-z0-9_.-]*)"
            r"(?P<sep>[\"']?\s*[:=]\s*[\"']?)"
            r"(?P<value>(?!\*\*\*)(?!(?:Bearer|Basic|Token)\s)[^\s\"',;&}]+)",
            re.IGNORECASE,
        ),
        r"\g<key>\g<sep>" + MASK,
    ),
    # Credentials in URLs: scheme://user:password@host.
    (re.compile(r"(?P<pre>[a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+(?=@)"), r"\g<pre>" + MASK),
)

# A long token mixing upper case, lower case and digits (without spaces) is
# probably a secret; hex digests and uuids (one case only) are left alone.
_LONG_TOKEN = re.compile(r"(?<![A-Za-z0-9_+/=-])[A-Za-z0-9_+/=-]{32,}(?![A-Za-z0-9_+/=-])")


def is_sensitive_key(name: str) -> bool:
    """True when an argument named ``name`` holds a secret (``api_key``, ``Authorization``...)."""
    return SENSITIVE_KEY.search(name) is not None


def _looks_random(token: str) -> bool:
    return (
        any(c.islower() for c in token)
        and any(c.isupper() for c in token)
        and any(c.isdigit() for c in token)
    )


def mask_secrets(text: str) -> str:
    """``text`` with everything that looks like a credential replaced by ``***``."""
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return _LONG_TOKEN.sub(lambda m: MASK if _looks_random(m.group()) else m.group(), text)


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
    redacted: dict[str, Any] = {}
    for key, item in data.items():
        if key == "arguments" and event_type == "tool_call_started":
            redacted[key] = redact_arguments(item)
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
