"""Proactive memory: recall before each model call, a core block, extraction after each
answer.

- **recall** and the **core block** are added as call-scope context (the kernel
  journals them with the call). What was recalled for a message is journaled
  (``memory.recalled``) before it is used; a resumed run uses the journaled recall
  instead of searching again, so it sends the same request even if memory changed
  meanwhile. The search runs once per user message, not once per model call.
- **extract**: when the model answers, it is asked (a journaled side call, purpose
  ``memory.extract``) which lasting facts the turn taught; they are stored with ids
  derived from the session, the step and their text (a resumed run stores nothing
  twice) and journaled (``memory.extracted``).

Runs before koboi-context's strategy (priority 800 < 900), which then counts what
this adds when it fits the request to the window.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from koboi.errors import BudgetExceeded, KoboiError, ProviderError, describe_error
from koboi.interceptors import FinishDecision, Interceptor, Refusal, RunInfo
from koboi.logs import get_logger
from koboi.messages import Message, ModelRequest
from koboi_memory.assembly import FEATURE, core_scope, memory_for, scope_for
from koboi_memory.store import Fact, fact_id

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.store import JournalEvent
    from koboi_memory.config import MemorySettings

log = get_logger("koboi.memory")

RECALLED = "memory.recalled"
EXTRACTED = "memory.extracted"
RUN = "memory.run"
EXTRACT_PURPOSE = "memory.extract"
EXTRACT_PROMPT = (
    "You maintain a long-term memory of facts about the user and their work. From the "
    "exchange below, list the facts worth remembering in later conversations (names, "
    "preferences, decisions, lasting details), each one short sentence. Mark as core the "
    'few that should always be in mind. Answer with JSON only: {"facts": ["..."], '
    '"core": ["..."]}, or {"facts": [], "core": []} when there is nothing lasting.'
)


class ProactiveMemory(Interceptor):
    name = "memory"
    priority = 800
    event_namespace = "memory"

    def __init__(self, settings: MemorySettings, config: AgentConfig) -> None:
        from koboi.store import KeyedRecords

        self.settings = settings
        self.config = config
        self.proactive = settings.proactive
        if not (settings.db_path or settings.url or settings.backend == "memory"):
            self.store_needs = ((KeyedRecords, FEATURE),)

    async def restore(self, events: Sequence[JournalEvent], run: RunInfo) -> None:
        # Only what the interrupted run recalled matters (a new run searches afresh).
        recalled: dict[str, Any] = {}
        for event in events:
            if event.type == RUN:
                recalled = {}
            elif event.type == RECALLED:
                recalled[str(event.data["query"])] = event.data["facts"]
        run.state["memory.recalled"] = recalled

    async def on_run_start(self, run: RunInfo) -> Refusal | None:
        if not run.resumed:
            run.state["memory.recalled"] = {}
            run.record(RUN, {"step": run.step})
        return None

    async def before_model_call(self, request: ModelRequest, run: RunInfo) -> ModelRequest | None:
        memory = await memory_for(self.config, run.store, run.host)
        scope = scope_for(self.config, run.owner)
        if self.proactive.wants("core_block"):
            core = await memory.core(core_scope(self.config, scope))
            block = _block(
                "Core memory (always true of this user):",
                [fact.text for fact in sorted(core, key=_newest_first)],
                self.proactive.core_block_chars,
            )
            if block:
                run.add_context(block, scope="call")
        if self.proactive.wants("recall"):
            query = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
            recalled: dict[str, Any] = run.state.setdefault("memory.recalled", {})
            facts = recalled.get(query)
            if facts is None and query:
                hits = await memory.search(
                    scope, query, k=self.proactive.top_k, min_score=self.proactive.min_score
                )
                facts = [{"id": h.fact.id, "text": h.fact.text} for h in hits]
                recalled[query] = facts
                run.record(RECALLED, {"step": run.step, "query": query, "facts": facts})
            if facts:
                lines = [f["text"] for f in facts]
                run.add_context(
                    "Remembered about this user:\n- " + "\n- ".join(lines), scope="call"
                )
        return None

    async def before_finish(self, answer: str, run: RunInfo) -> FinishDecision | None:
        if not self.proactive.wants("extract"):
            return None
        exchange = f"User: {run.input}\nAssistant: {answer}"
        request = ModelRequest(messages=[Message.system(EXTRACT_PROMPT), Message.user(exchange)])
        try:
            response = await run.model.complete(request, purpose=EXTRACT_PURPOSE)
        except (ProviderError, BudgetExceeded) as exc:
            # Memory is best effort: the answer stands; the failure is journaled by the
            # kernel (side_call_failed) and logged here.
            log.warning("memory: extraction failed: %s", describe_error(exc))
            return None
        facts, core = parse_extraction(response.message.content)
        memory = await memory_for(self.config, run.store, run.host)
        scope = scope_for(self.config, run.owner)
        stored = []
        for index, text in enumerate([*core, *facts]):
            is_core = index < len(core)
            where = core_scope(self.config, scope) if is_core else scope
            text = text[: self.settings.max_fact_chars]
            try:
                fact, _ = await memory.add(
                    where,
                    text,
                    source="extracted",
                    core=is_core,
                    session=run.session_id,
                    id=fact_id(run.session_id, run.step, text),
                    limit=self.proactive.max_facts,
                )
            except KoboiError as exc:
                log.warning("memory: an extracted fact was not stored: %s", exc)
                continue
            stored.append({"id": fact.id, "text": fact.text, "core": is_core})
        if stored:
            run.record(EXTRACTED, {"step": run.step, "facts": stored})
        return None


def parse_extraction(text: str) -> tuple[list[str], list[str]]:
    """(facts, core facts) from the model's answer: the JSON asked for, else one per line."""
    found = re.search(r"\{.*\}", text, re.DOTALL)
    if found:
        try:
            data = json.loads(found.group(0))
        except ValueError:
            data = None
        if isinstance(data, dict):
            facts = [str(f).strip() for f in data.get("facts") or [] if str(f).strip()]
            core = [str(f).strip() for f in data.get("core") or [] if str(f).strip()]
            return [f for f in facts if f not in core], core
    lines = [line.strip(" -*\t") for line in text.splitlines()]
    return [line for line in lines if line], []


def _newest_first(fact: Fact) -> tuple[float, str]:
    return (-fact.created_at, fact.id)


def _block(heading: str, lines: list[str], limit: int) -> str | None:
    kept: list[str] = []
    used = len(heading)
    for line in lines:
        if used + len(line) + 3 > limit:
            break
        kept.append(line)
        used += len(line) + 3
    return heading + "\n- " + "\n- ".join(kept) if kept else None
