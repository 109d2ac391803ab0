"""Tier one: the names and descriptions of the offered skills, before every model call.

The list is journaled once per session (``skills.catalog``, in its first run)
and sent as a system message placed after the system prompt. The request
rewrite is journaled with each call, and the text is a pure function of the
journaled catalog and the budget: a resumed or replayed session sends exactly
what it sent, whatever the skills folders hold by then.
"""

from __future__ import annotations

from collections.abc import Sequence

from koboi.interceptors import Interceptor, PendingToolCall, Refusal, RunInfo, Verdict
from koboi.messages import Message, ModelRequest
from koboi.store import JournalEvent
from koboi.tools import ToolResult
from koboi_skills import session as S
from koboi_skills.discovery import Library
from koboi_skills.settings import SkillsSettings


class SkillCatalog(Interceptor):
    name = "skills"
    priority = 400  # after the guards: a refused run never pays for the catalog
    event_namespace = "skills"

    def __init__(self, settings: SkillsSettings, library: Library) -> None:
        self.settings = settings
        self.library = library

    async def restore(self, events: Sequence[JournalEvent], run: RunInfo) -> None:
        S.restore(run.state, events, self.settings)

    def _ensure_catalog(self, run: RunInfo) -> None:
        session = S.of(run.state)
        if not session.catalog and self.library.skills:
            entries = S.catalog_entries(self.library)
            S.set_catalog(session, entries, self.settings.budget_tokens)
            run.record(S.CATALOG_EVENT, {"skills": entries, "problems": self.library.problems})

    async def on_run_start(self, run: RunInfo) -> Refusal | None:
        self._ensure_catalog(run)
        return None

    async def before_tool_call(self, pending: PendingToolCall, run: RunInfo) -> Verdict | None:
        # A session whose first run is a direct tool call has had no on_run_start.
        if S.part_of(pending.tool, pending.call.arguments) is not None:
            self._ensure_catalog(run)
        return None

    async def after_tool_call(
        self, pending: PendingToolCall, result: ToolResult, run: RunInfo
    ) -> ToolResult | None:
        """Charge what a skills tool added: here, from its result, not in the tool, so a
        replay that serves the recorded result journals the same charge."""
        part = S.part_of(pending.tool, pending.call.arguments)
        if part is None or result.is_error:
            return None
        session = S.of(run.state)
        if part not in session.loaded:
            data = S.charge(session, self.settings.budget_tokens, *part, result.content)
            run.record(S.LOADED_EVENT, data)
        return None

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest | None:
        text = S.of(run.state).catalog_text
        if not text:
            return None
        messages = list(request.messages)
        at = 0
        while at < len(messages) and messages[at].role == "system":
            at += 1
        messages.insert(at, Message.system(text))
        return request.model_copy(update={"messages": messages})
