"""How a run's events read as text: shared by the TUI and the line mode.

Everything shown from a tool call, a tool result or the journal is masked first
(koboi_cli.api's redaction: secret-named keys and anything that looks like a
credential), as every other koboi command does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from koboi.approval import ApprovalRequest, canonical_arguments
from koboi.events import ToolResultEvent
from koboi.messages import ToolCall
from koboi.store import JournalEvent, SessionInfo, SessionTotals
from koboi_cli.api import mask_secrets, redact_arguments, redact_event_data

#: How much of a tool result is shown; the model always sees all of it.
MAX_RESULT_LINES = 8
MAX_RESULT_CHARS = 600


def shorten(text: str, *, lines: int = MAX_RESULT_LINES, chars: int = MAX_RESULT_CHARS) -> str:
    """At most ``lines`` lines and ``chars`` characters, saying how much was cut."""
    text = text.rstrip()
    shown = "\n".join(text.splitlines()[:lines])
    if len(shown) > chars:
        shown = shown[:chars].rstrip()
    hidden = len(text) - len(shown)
    if hidden > 0:
        shown += f" … ({hidden} more characters)"
    return shown


def call_arguments(call: ToolCall) -> str:
    """A tool call's arguments as one masked line of canonical JSON."""
    return canonical_arguments(redact_arguments(dict(call.arguments)))


def tool_call_text(call: ToolCall) -> str:
    return f"→ {call.name} {call_arguments(call)}"


def tool_result_text(event: ToolResultEvent) -> str:
    body = shorten(mask_secrets(event.content)) or "(empty)"
    if event.refused_by:
        return f"← refused by {event.refused_by}: {body}"
    if event.is_error:
        return f"← error: {body}"
    return f"← {body}"


def shown_arguments(request: ApprovalRequest) -> str:
    """The arguments of a request, masked, as one line of canonical JSON."""
    return canonical_arguments(redact_arguments(dict(request.display_arguments)))


def approval_arguments(request: ApprovalRequest) -> str:
    """The arguments of a request, masked, as indented JSON (what the panel shows)."""
    shown = redact_arguments(dict(request.display_arguments))
    return json.dumps(shown, indent=2, ensure_ascii=False, sort_keys=True)


def tokens_text(totals: SessionTotals) -> str:
    return f"{totals.input_tokens:,} in / {totals.output_tokens:,} out"


def cost_text(cost_usd: float) -> str:
    return f"${cost_usd:.4f}"


def journal_line(event: JournalEvent, width: int = 200) -> str:
    """One journal event as one line: sequence number, type, its masked data."""
    data = redact_event_data(event.type, dict(event.data))
    body = json.dumps(_compact(data), ensure_ascii=False, separators=(",", ":"), default=str)
    line = f"{event.seq:>5}  {event.type:<24} {body}"
    return line if len(line) <= width else line[: width - 1] + "…"


def _compact(value: Any) -> Any:
    """Long strings cut, so that one event stays one readable line."""
    if isinstance(value, str):
        return value if len(value) <= 120 else value[:117] + "…"
    if isinstance(value, Mapping):
        return {k: _compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compact(v) for v in value[:20]]
    return value


def session_title(info: SessionInfo, first_input: str | None = None) -> str:
    """What the session list shows of a session besides its columns."""
    said = (first_input or "").strip().splitlines()[0] if first_input else ""
    return mask_secrets(said[:60])
