"""The command-hook contract coding agents share: what a hook is given and what it may say.

**Input** (one JSON object on stdin, or a URL hook's request body)::

    {"hook_event_name": "PreToolUse", "koboi_event": "before_tool_call",
     "session_id": "...", "cwd": "<the session's working directory>", "agent": "...",
     "step": 1, "tool_name": "run_shell", "tool_input": {...}, "tool_use_id": "call_1"}

plus, per event: ``prompt`` (user_prompt), ``source`` (session_start),
``tool_response`` (after_tool_call: ``{"content", "is_error"}``),
``stop_hook_active`` and ``last_assistant_message`` (before_finish), ``trigger``,
``custom_instructions`` and the compaction figures (pre_compact), ``outcome`` and
``error`` (run_end).

**Output**:

- exit code 2: block; stderr is the reason (stdout is ignored);
- exit code 0: what stdout says. Nothing: go on. A JSON object: ``decision``
  (``block``; for tool calls also ``allow`` / ``approve``, ``deny``, ``ask``),
  ``reason``, ``continue: false`` with ``stopReason`` (blocks too),
  ``additionalContext``, ``updatedInput``, ``systemMessage``, or the same under
  ``hookSpecificOutput`` (``permissionDecision``, ``permissionDecisionReason``,
  ``updatedInput``, ``additionalContext``). Plain text is context for
  session_start and user_prompt, and extra instructions for pre_compact;
- anything else (another exit code, a crash, a timeout, text that is not a JSON
  object where one is expected, invalid JSON, too much output) is a hook
  **error**, handled by the event's failure rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from koboi.sandbox import ProcessResult

Action = Literal["none", "allow", "block", "ask"]

#: Events for which plain text on stdout is context (or instructions), not garbage.
TEXT_IS_CONTEXT = frozenset({"session_start", "user_prompt", "pre_compact"})
#: Decisions that mean something only for a tool call.
TOOL_DECISIONS = {"allow": "allow", "approve": "allow", "deny": "block", "ask": "ask"}
_SHOWN = 300


def clip(text: str, limit: int = _SHOWN) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class HookOutcome:
    """What one hook said (or why it failed: ``error``)."""

    action: Action = "none"
    reason: str = ""
    context: str = ""
    updated_input: dict[str, Any] | None = None
    system_message: str = ""
    error: str = ""
    exit_code: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.error)

    def data(self) -> dict[str, Any]:
        """The journaled form: only what the hook decided, never timings (replay compares it)."""
        data: dict[str, Any] = {"decision": "error" if self.error else self.action}
        if self.exit_code is not None:
            data["exit_code"] = self.exit_code
        for key, value in (
            ("reason", self.reason),
            ("context", self.context),
            ("system_message", self.system_message),
            ("error", self.error),
        ):
            if value:
                data[key] = value
        if self.updated_input is not None:
            data["updated_input"] = self.updated_input
        if self.notes:
            data["notes"] = list(self.notes)
        return data


def failure(message: str, exit_code: int | None = None) -> HookOutcome:
    return HookOutcome(error=message, exit_code=exit_code)


def from_process(event: str, result: ProcessResult, timeout: float) -> HookOutcome:
    """Read a finished command by the contract's exit-code rules."""
    if result.timed_out:
        return failure(f"timed out after {timeout:g} s (killed)")
    code = result.returncode
    if result.truncated:
        return failure("printed more than hooks.max_output bytes", code)
    if code == 2:
        reason = clip(result.stderr, 2000) or "blocked (exit code 2, nothing on stderr)"
        return HookOutcome(action="block", reason=reason, exit_code=2)
    if code != 0:
        said = clip(result.stderr) or clip(result.stdout)
        how = (
            f"was killed by signal {-code}"
            if code is not None and code < 0
            else (f"exited with code {code}")
        )
        return failure(f"{how}" + (f": {said}" if said else ""), code)
    outcome = from_output(event, result.stdout)
    outcome.exit_code = 0
    return outcome


def from_output(event: str, text: str) -> HookOutcome:
    """Read what a hook printed (exit 0) or a URL hook answered (2xx)."""
    stripped = text.strip()
    if not stripped:
        return HookOutcome()
    if stripped[0] not in "{[":
        if event in TEXT_IS_CONTEXT:
            return HookOutcome(context=stripped)
        return failure(
            f"printed text that is not a JSON object ({clip(stripped, 80)!r}); a {event} hook "
            "prints nothing or one JSON object"
        )
    try:
        document = json.loads(stripped)
    except ValueError as exc:
        return failure(f"printed invalid JSON ({exc}): {clip(stripped, 80)!r}")
    if not isinstance(document, dict):
        return failure(f"printed JSON that is not an object ({type(document).__name__})")
    try:
        return _from_document(event, document)
    except _Malformed as exc:
        return failure(f"printed a JSON object the contract does not allow: {exc}")


class _Malformed(Exception):
    pass


def _text(document: Mapping[str, Any], key: str) -> str:
    value = document.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Malformed(f"{key!r} must be text, not {type(value).__name__}")
    return value


def _from_document(event: str, document: Mapping[str, Any]) -> HookOutcome:
    specific = document.get("hookSpecificOutput")
    if specific is None:
        specific = {}
    if not isinstance(specific, Mapping):
        raise _Malformed("'hookSpecificOutput' must be an object")
    outcome = HookOutcome(system_message=_text(document, "systemMessage"))
    contexts = [
        c for c in (_text(document, "additionalContext"), _text(specific, "additionalContext")) if c
    ]
    outcome.context = "\n\n".join(contexts)
    updated = specific.get("updatedInput", document.get("updatedInput"))
    if updated is not None:
        if not isinstance(updated, dict):
            raise _Malformed("'updatedInput' must be an object (the tool's new arguments)")
        if event != "before_tool_call":
            outcome.notes.append(
                "updatedInput ignored: only before_tool_call hooks rewrite arguments"
            )
        else:
            outcome.updated_input = updated
    reason = _text(specific, "permissionDecisionReason") or _text(document, "reason")
    decision = _text(specific, "permissionDecision") or _text(document, "decision")
    if document.get("continue") is False:
        outcome.action = "block"
        outcome.reason = _text(document, "stopReason") or reason or "the hook asked to stop"
        return outcome
    if document.get("continue") not in (None, True):
        raise _Malformed("'continue' must be true or false")
    if not decision:
        outcome.reason = reason
        return outcome
    if decision == "block":
        outcome.action = "block"
    elif decision in TOOL_DECISIONS:
        if event == "before_tool_call":
            outcome.action = TOOL_DECISIONS[decision]  # type: ignore[assignment]
        elif decision == "deny":
            outcome.action = "block"
        else:
            outcome.notes.append(f"decision {decision!r} ignored: it applies to tool calls only")
    else:
        raise _Malformed(f"unknown decision {decision!r} (block, allow, deny or ask)")
    outcome.reason = reason
    return outcome
