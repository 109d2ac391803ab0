"""RAG in an agent: the ``rag`` toolset (``rag__search``, and ingestion when the agent
opens) and the interceptor that adds retrieved context and journals citations.

Replay: ``rag__search`` records nothing itself; its result (JSON, with each result's
citation) is journaled as the tool's result, and the interceptor's
``after_tool_call`` journals the citations as a ``rag.retrieved`` event from that
result, a pure function of journaled data, so a replay that serves the recorded
result writes the same event. Context added before the model call is journaled
with the call (``model_call_started.request``) and as ``rag.retrieved``; a replay
retrieves again from the index, which the agent builds when it opens.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from koboi.errors import KoboiError, ToolError
from koboi.interceptors import FinishDecision, Interceptor, PendingToolCall, RunInfo
from koboi.logs import get_logger
from koboi.tools import Risk, Tool, ToolContext, ToolResult
from koboi.toolsets import Toolset, ToolsetContext, ToolsetTool

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost
    from koboi.store import Store
    from koboi_rag.config import RagSettings
    from koboi_rag.engine import RagEngine, SearchOutcome

log = get_logger("koboi_rag.agent")

#: The tool's own name; the agent offers it in the ``rag`` toolset's namespace, so the
#: model sees ``rag__search`` (or ``<namespace>__search`` under ``tools.namespaces``).
TOOL_NAME = "search"
RETRIEVED = "rag.retrieved"
CITED = "rag.cited"
_CITE = re.compile(r"\[(\d{1,3})\]")


#: The engine of each agent, shared by its toolset and its interceptor (and so is the
#: ingestion at open): found by the agent's store, or, for an index of its own
#: (``rag.index`` a URL), by its config; then by the section's settings.
_engines: weakref.WeakKeyDictionary[Any, dict[str, RagEngine]] = weakref.WeakKeyDictionary()
#: Engines whose ``rag.documents`` were ingested (``rag.auto_ingest``), with the lock
#: that makes it once.
_ingestion: weakref.WeakKeyDictionary[RagEngine, tuple[anyio.Lock, list[bool]]] = (
    weakref.WeakKeyDictionary()
)


def engine_for(
    settings: RagSettings, store: Store | None, host: PluginHost | None, config: AgentConfig
) -> RagEngine:
    """The agent's engine over its index (made on first use)."""
    from koboi.plugins import default_host
    from koboi_rag.engine import RagEngine

    per_owner = _engines.setdefault(store if store is not None else config, {})
    key = settings.model_dump_json()
    engine = per_owner.get(key)
    if engine is None:
        engine = per_owner[key] = RagEngine.for_store(
            settings, store, host=host or default_host(), base_dir=config.base_dir
        )
    return engine


async def ingest_once(engine: RagEngine) -> None:
    """Ingest ``rag.documents`` into the engine's index once, when ``rag.auto_ingest``:
    when the toolset opens, or before the first retrieval of context when no toolset
    opened (a replay under ``--tools recorded`` offers the recorded tools instead)."""
    settings = engine.settings
    if not (settings.auto_ingest and settings.documents):
        return
    lock, done = _ingestion.setdefault(engine, (anyio.Lock(), [False]))
    async with lock:
        if done[0]:
            return
        report = await engine.ingest()
        for failure in report.failed:
            log.warning("rag: %s: %s", failure["document"], failure["error"])
        done[0] = True


def render_context(outcome: SearchOutcome, template: str) -> str:
    """The retrieved chunks as the model reads them, numbered for citation."""
    blocks = [
        f"[{r.n}] {r.label()} (score {r.score:.3f})\n{r.text.strip()}" for r in outcome.results
    ]
    return template.replace("{results}", "\n\n".join(blocks))


class SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="What to look for, in your own words.")
    top_k: int | None = Field(
        default=None, ge=1, le=50, description="How many passages (default: the configured top_k)."
    )
    filter: dict[str, Any] | None = Field(
        default=None,
        description='Metadata filter, e.g. {"source": "handbook.md"} or {"year": {"$gte": 2020}}.',
    )


def is_search_tool(tool: Tool) -> bool:
    """Whether ``tool`` is the ``rag`` toolset's search tool, under whatever namespace it
    is offered (a replay under ``--tools recorded`` offers its recorded definition)."""
    if isinstance(tool, RagSearchTool):
        return True
    return (
        isinstance(tool, ToolsetTool)
        and tool.toolset == RagToolset.name
        and tool.original.name == TOOL_NAME
    )


def offered_search_name(tools: Mapping[str, Tool]) -> str | None:
    """The name an agent offers the search tool under (None: rag.tool is off)."""
    return next((name for name, tool in tools.items() if is_search_tool(tool)), None)


class RagSearchTool(Tool):
    """Search the agent's documents; results carry their citations."""

    name = TOOL_NAME
    description = (
        "Search the documents indexed for this agent. Returns the most relevant passages as "
        "JSON, each with its citation: source, position (chunk number in the document), "
        "character span, heading and score. Cite passages as [n]."
    )
    args_model = SearchArgs
    risk = Risk.SAFE
    idempotent = True

    def __init__(self, toolset: RagToolset) -> None:
        self._toolset = toolset

    async def invoke(self, args: BaseModel, ctx: ToolContext) -> ToolResult:
        assert isinstance(args, SearchArgs)
        engine = self._toolset.engine
        if engine is None:
            raise ToolError("the document index is not open")
        model = ctx.model if ctx.run is not None and _needs_model(engine.settings) else None
        try:
            outcome = await engine.search(
                args.query, top_k=args.top_k, filter=args.filter, model=model
            )
        except KoboiError as exc:
            raise ToolError(str(exc)) from None
        content = json.dumps(outcome.data(), ensure_ascii=False, sort_keys=True)
        return ToolResult(content, data=outcome.data())


def _needs_model(settings: RagSettings) -> bool:
    reranker = settings.reranker
    return (
        settings.query_rewrite
        or settings.hyde
        or (reranker is not None and reranker.provider == "llm")
    )


class RagToolset(Toolset):
    """Opens the config's index for the agent (ingesting ``rag.documents`` first when
    ``rag.auto_ingest``) and offers ``rag__search`` when ``rag.tool``."""

    name = "rag"

    def __init__(self, settings: RagSettings, config: AgentConfig) -> None:
        self.settings = settings
        self.config = config
        self.engine: RagEngine | None = None
        self._tools: list[Tool] = []

    async def open(self, context: ToolsetContext) -> None:
        self.engine = engine_for(self.settings, context.store, context.host, self.config)
        await ingest_once(self.engine)
        if self.settings.tool:
            self._tools = [RagSearchTool(self)]

    def tools(self) -> Sequence[Tool]:
        return list(self._tools)


def create_toolset(config: AgentConfig) -> RagToolset | None:
    settings = config.section("rag")
    if settings is None or not getattr(settings, "enabled", False):
        return None
    return RagToolset(settings, config)  # type: ignore[arg-type]


class RagInterceptor(Interceptor):
    """Adds retrieved context to each run's first model call (``augmentation``), and
    journals what was retrieved (``rag.retrieved``) and cited (``rag.cited``)."""

    name = "rag"
    priority = 400  # after governance's guards (mode 50, policy 100, guardrails 200)

    def __init__(self, settings: RagSettings, config: AgentConfig) -> None:
        self.settings = settings
        self.config = config
        self._engine: RagEngine | None = None

    def _engine_for(self, run: RunInfo) -> RagEngine:
        if self._engine is None:
            self._engine = engine_for(self.settings, run.store, run.host, self.config)
        return self._engine

    async def on_run_start(self, run: RunInfo) -> None:
        if self.settings.augmentation == "none" or not run.input.strip():
            return None
        engine = self._engine_for(run)
        try:
            await ingest_once(engine)
            outcome = await engine.search(run.input, model=run.model)
        except KoboiError as exc:
            # The run goes on without context; the journal says why.
            run.record(RETRIEVED, {"via": "context", "query": run.input, "error": str(exc)})
            return None
        run.record(
            RETRIEVED,
            {
                "via": "context",
                "query": outcome.query,
                "retriever": outcome.retriever,
                "results": [r.data() for r in outcome.results],
                **({"rewritten": outcome.searched} if outcome.searched != outcome.query else {}),
            },
        )
        run.state["rag.citations"] = outcome.citations()
        if outcome.results:
            scope: Literal["call", "session"] = (
                "session" if self.settings.augmentation == "in_memory" else "call"
            )
            run.add_context(
                render_context(outcome, self.settings.context_template), scope=scope, source="rag"
            )
        return None

    async def after_tool_call(
        self, pending: PendingToolCall, result: ToolResult, run: RunInfo
    ) -> ToolResult | None:
        if not is_search_tool(pending.tool) or result.is_error:
            return None
        try:
            data = json.loads(result.content)
        except ValueError:
            return None
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            return None
        kept = [item for item in results if isinstance(item, dict)]
        citations = [{k: v for k, v in item.items() if k != "text"} for item in kept]
        run.record(
            RETRIEVED,
            {
                "via": "tool",
                "call_id": pending.call.id,
                "query": data.get("query", ""),
                "retriever": data.get("retriever", ""),
                "results": kept,
            },
        )
        run.state.setdefault("rag.tool_citations", []).append(citations)
        return None

    async def before_finish(self, answer: str, run: RunInfo) -> FinishDecision | None:
        numbers = [int(n) for n in dict.fromkeys(_CITE.findall(answer))]
        if not numbers:
            return None
        sources: list[dict[str, Any]] = list(run.state.get("rag.citations") or [])
        for batch in run.state.get("rag.tool_citations") or []:
            sources = list(batch)  # the latest search's numbering is what the model saw last
        by_number = {int(c["n"]): c for c in sources if isinstance(c, dict) and "n" in c}
        cited = [by_number[n] for n in numbers if n in by_number]
        if cited:
            run.record(CITED, {"citations": cited})
        return None
