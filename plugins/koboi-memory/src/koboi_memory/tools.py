"""memory_store, memory_recall, memory_forget: the model's own hands on its memory.

Every call works in the memory of the run's principal (or the config's
``memory.owner`` for a local run) and agent, never another's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from koboi import Risk, Tool, ToolContext, tool
from koboi.errors import KoboiError, ToolError
from koboi_memory.assembly import core_scope, memory_for, scope_for
from koboi_memory.store import MemoryStore, Scope, fact_id

if TYPE_CHECKING:
    from koboi.config import AgentConfig


async def _memory(config: AgentConfig, ctx: ToolContext) -> tuple[MemoryStore, Scope]:
    if ctx.run is None:
        raise ToolError("memory tools work inside a run (they need its store and its user)")
    try:
        memory = await memory_for(config, ctx.run.store, ctx.run.host)
    except KoboiError as exc:
        raise ToolError(str(exc)) from None
    return memory, scope_for(config, ctx.run.owner)


def make_store_tool(config: AgentConfig) -> Tool:
    @tool(name="memory_store", risk=Risk.SAFE, idempotent=True, thread=False)
    async def memory_store(text: str, ctx: ToolContext, core: bool = False) -> str:
        """Remember a fact for later conversations with this user.

        Args:
            text: The fact, in one sentence.
            core: True for a fact that should always be in mind (the user's name, a
                standing preference).
        """
        memory, scope = await _memory(config, ctx)
        where = core_scope(config, scope) if core else scope
        try:
            # Its id comes from the call: a resumed run that stores it again changes nothing.
            fact, dropped = await memory.add(
                where,
                text,
                core=core,
                session=ctx.session_id,
                id=fact_id(ctx.session_id, ctx.call_id, text),
            )
        except KoboiError as exc:
            raise ToolError(str(exc)) from None
        note = f" (the oldest {len(dropped)} fact(s) were dropped to make room)" if dropped else ""
        return f"remembered [{fact.id}]: {fact.text}{note}"

    return memory_store


def make_recall_tool(config: AgentConfig) -> Tool:
    @tool(name="memory_recall", risk=Risk.SAFE, idempotent=True, thread=False)
    async def memory_recall(query: str, ctx: ToolContext, top_k: int = 5) -> str:
        """Search what you remember about this user.

        Args:
            query: What to look for.
            top_k: How many facts at most (1 to 20).
        """
        memory, scope = await _memory(config, ctx)
        hits = await memory.search(scope, query, k=max(1, min(20, top_k)))
        if not hits:
            return "nothing remembered matches"
        return "\n".join(f"[{h.fact.id}] {h.fact.text}" for h in hits)

    return memory_recall


def make_forget_tool(config: AgentConfig) -> Tool:
    @tool(name="memory_forget", risk=Risk.MODERATE, idempotent=True, thread=False)
    async def memory_forget(fact_id: str, ctx: ToolContext) -> str:
        """Forget a remembered fact.

        Args:
            fact_id: The id shown in brackets by memory_recall.
        """
        memory, scope = await _memory(config, ctx)
        gone = await memory.forget(scope, [fact_id])
        if not gone and core_scope(config, scope) != scope:
            gone = await memory.forget(core_scope(config, scope), [fact_id])
        if not gone:
            raise ToolError(f"no remembered fact has the id {fact_id!r}")
        return f"forgot [{fact_id}]"

    return memory_forget
