"""``deep_research``: plan, search, fetch, extract, a coverage gate, a cited report.

1. **Plan**: the model splits the question into sub-questions (a side call,
   purpose ``research.plan``, answering JSON ``{"questions": [...]}``); an
   answer that does not parse leaves one sub-question, the question itself.
2. **Search and fetch**: for each sub-question without a source, the search
   tool, then the fetch tool on each result not fetched yet. Both are the
   run's own governed tool calls (``RunHandle.call_tool``): mode, policy,
   approval, the sandbox and web_fetch's SSRF guard apply, each call is
   journaled, and after a crash a call the journal settled is not made again.
3. **Extract**: the sentences of a page that share the most meaning words
   with the sub-question, verbatim (:mod:`koboi_research.extract`).
4. **Coverage gate**: a round ends with ``research.coverage``; another round
   (a reworded query: side call ``research.refine``) follows while a
   sub-question has no source, until ``max_depth`` rounds, ``max_searches``,
   ``max_fetches`` or the run's budget end it.
5. **Report**: claims citing numbered sources, each an address and a quote
   (:mod:`koboi_research.report`).

Everything it learns is journaled as ``research.*`` plugin events in the
run's session; on resume the run goes through the same steps, and every tool
call and side call already answered is answered again from the journal.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from koboi.errors import BudgetExceeded, KoboiError, ProviderError
from koboi.runners import Runner
from koboi_research.config import ResearchSection
from koboi_research.extract import page_text, parse_results, quotes_for
from koboi_research.report import Claim, Source, claims_of, numbered_quotes, quote_claims, render

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.events import AgentEvent
    from koboi.runners import RunHandle

NAMESPACE = "research"


class _OutOfBudget(Exception):
    """The run's budget (or a research limit) ended the loop."""


@dataclass
class _Journal:
    """Records ``research.*`` events once: on resume, those already journaled are kept."""

    run: RunHandle
    seen: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, run: RunHandle) -> _Journal:
        journal = cls(run)
        for event in run.plugin_events(NAMESPACE):
            if event.seq > run.started_seq:  # this run's: an earlier run's are its own
                journal.seen.add(_key(event.type, event.data))
        return journal

    def record(self, kind: str, data: Mapping[str, Any]) -> None:
        event_type = f"{NAMESPACE}.{kind}"
        key = _key(event_type, data)
        if key not in self.seen:
            self.seen.add(key)
            self.run.info.record(event_type, data)


def _key(event_type: str, data: Mapping[str, Any]) -> str:
    return event_type + json.dumps(data, sort_keys=True, default=str)


@dataclass
class _Question:
    text: str
    sources: list[tuple[str, list[str]]] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)


class DeepResearch(Runner):
    """The ``deep_research`` runner (see the module doc)."""

    name = "deep_research"

    def __init__(self, settings: ResearchSection) -> None:
        self.settings = settings

    async def run(self, run: RunHandle) -> AsyncIterator[AgentEvent]:
        await _Study(run, self.settings).study()
        return
        yield  # an async generator


class _Study:
    """One research run."""

    def __init__(self, run: RunHandle, settings: ResearchSection) -> None:
        self.handle = run
        self.settings = settings
        self.journal = _Journal.of(run)
        self.questions: list[_Question] = []
        self.pages: dict[str, str | None] = {}
        self.searches = 0
        self.fetches = 0
        self.stopped: str | None = None
        self.out_of_budget: str | None = None

    async def study(self) -> None:
        run = self.handle
        try:
            self.questions = [_Question(q) for q in await self._plan()]
            for round_ in range(1, self.settings.max_depth + 1):
                await self._round(round_)
                covered = [q.text for q in self.questions if q.sources]
                missing = [q.text for q in self.questions if not q.sources]
                self.journal.record(
                    "coverage",
                    {"round": round_, "covered": covered, "missing": missing},
                )
                if len(covered) >= self.settings.coverage_threshold * len(self.questions):
                    break
                if self.stopped is not None:
                    break
            report = await self._report()
        except BudgetExceeded as exc:
            self.out_of_budget = str(exc)
            report = self._written(quote_claims(self._sources()), [], "the budget ran out")
        if self.out_of_budget is not None:
            run.finish(report, outcome="budget_exceeded", error=self.out_of_budget)
        else:
            run.finish(report)

    # -- 1. plan --------------------------------------------------------------------------

    async def _plan(self) -> list[str]:
        question = self.handle.input.strip()
        system = (
            "You plan web research. Split the user's question into at most "
            f"{self.settings.max_sub_questions} short sub-questions that together answer it, "
            'each one searchable on its own. Answer with JSON only: {"questions": ["...", ...]}.'
        )
        answer = await self._ask(question, "research.plan", system)
        questions = _questions(answer, self.settings.max_sub_questions)
        planned = questions or [question]
        self.journal.record("planned", {"questions": planned, "from_model": bool(questions)})
        return planned

    # -- 2-4. search, fetch, extract, one round ---------------------------------------------

    async def _round(self, round_: int) -> None:
        settings = self.settings
        for index, question in enumerate(self.questions):
            if question.sources or self.stopped is not None:
                continue
            if self.searches >= settings.max_searches:
                self._stop("max_searches")
                break
            query = question.text if round_ == 1 else await self._reworded(question)
            question.queries.append(query)
            self.searches += 1
            found = await self.handle.call_tool(
                settings.search_tool,
                {"query": query, "max_results": settings.results_per_search},
                call_id=f"research-search-{round_}-{index}",
            )
            results = [] if found.is_error else parse_results(found.content)
            searched: dict[str, Any] = {
                "round": round_,
                "question": question.text,
                "query": query,
                "results": [r.address for r in results],
            }
            if found.is_error:
                searched["error"] = found.content
            self.journal.record("searched", searched)
            for result in results:
                text = await self._page(result.address)
                if text is None:
                    continue
                quotes = quotes_for(question.text, text, settings.quotes_per_source)
                if quotes:
                    question.sources.append((result.address, quotes))
                    self.journal.record(
                        "source",
                        {"question": question.text, "address": result.address, "quotes": quotes},
                    )
                if len(question.sources) >= 2 or self.stopped is not None:
                    break

    async def _page(self, address: str) -> str | None:
        """The text of ``address`` (fetched once per run; None when it could not be)."""
        if address in self.pages:
            return self.pages[address]
        if self.fetches >= self.settings.max_fetches:
            self._stop("max_fetches")
            return None
        self.fetches += 1
        digest = hashlib.sha256(address.encode()).hexdigest()[:16]
        fetched = await self.handle.call_tool(
            self.settings.fetch_tool,
            {self.settings.fetch_argument: address},
            call_id=f"research-fetch-{digest}",
        )
        text = None if fetched.is_error else page_text(fetched.content)
        self.pages[address] = text
        note: dict[str, Any] = {"address": address, "ok": text is not None}
        if text is None:
            note["error"] = fetched.content[:500]
        self.journal.record("fetched", note)
        return text

    async def _reworded(self, question: _Question) -> str:
        """Another query for a sub-question the earlier ones found nothing for."""
        tried = "; ".join(question.queries)
        system = (
            "Earlier web searches found no usable page for a research sub-question. Write one "
            "new, different search query for it. Answer with the query only."
        )
        prompt = f"Sub-question: {question.text}\nQueries tried: {tried}"
        answer = (await self._ask(prompt, "research.refine", system)).strip().splitlines()
        query = answer[0].strip().strip('"') if answer else ""
        if not query or query in question.queries:
            # The model had nothing new: widen the query with the whole question.
            query = f"{question.text} {self.handle.input}".strip()
        return query

    def _stop(self, limit: str) -> None:
        if self.stopped is None:
            self.stopped = limit
            self.journal.record("stopped", {"reason": f"research.{limit} reached"})

    # -- 5. report --------------------------------------------------------------------------

    def _sources(self) -> list[Source]:
        sources: list[Source] = []
        for question in self.questions:
            for address, quotes in question.sources:
                for quote in quotes:
                    sources.append(Source(len(sources) + 1, address, quote, question.text))
        return sources

    async def _report(self) -> str:
        sources = self._sources()
        if not sources:
            return self._written([], [], "no source was found")
        if self.settings.report == "quotes":
            return self._written(quote_claims(sources), [], "")
        system = (
            "Write a short research report that answers the question from the numbered quotes "
            "only. Write one claim per line. End every claim with the numbers of the quotes "
            "that support it, like [1] or [2][3]. State nothing the quotes do not support."
        )
        prompt = f"Question: {self.handle.input.strip()}\n\nQuotes:\n{numbered_quotes(sources)}"
        answer = await self._ask(prompt, "research.report", system)
        claims, dropped = claims_of(answer, {s.number for s in sources})
        if not claims:
            return self._written(
                quote_claims(sources), dropped, "no claim of the model cited a source"
            )
        return self._written(claims, dropped, "")

    def _written(self, claims: list[Claim], dropped: list[str], note: str) -> str:
        sources = self._sources()
        text = render(self.handle.input, claims, sources)
        missing = [q.text for q in self.questions if not q.sources]
        if missing:
            text += "\n## Not covered\n\n" + "".join(f"- {m}\n" for m in missing)
        data: dict[str, Any] = {
            "claims": [{"text": c.text, "citations": list(c.citations)} for c in claims],
            "sources": [
                {"number": s.number, "address": s.address, "quote": s.quote} for s in sources
            ],
            "dropped": dropped,
        }
        if note:
            data["note"] = note
        self.journal.record("report", data)
        return text

    async def _ask(self, prompt: str, purpose: str, system: str) -> str:
        """A side call; a provider that fails leaves the deterministic fallback."""
        try:
            return await self.handle.model.ask(prompt, purpose=purpose, system=system)
        except ProviderError:
            return ""


def _questions(answer: str, limit: int) -> list[str]:
    fenced = re.search(r"```(?:json)?\s*(.*?)```", answer, re.DOTALL)
    text = fenced.group(1) if fenced else answer
    try:
        data = json.loads(text.strip())
    except ValueError:
        return []
    raw = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        return []
    questions = [" ".join(str(q).split()) for q in raw if str(q).strip()]
    return list(dict.fromkeys(questions))[:limit]


def create_runner(options: Any, config: AgentConfig) -> DeepResearch:
    """The runner factory: the tools it calls must be the agent's, checked at assembly."""
    section = config.section("research")
    settings = section if isinstance(section, ResearchSection) else ResearchSection()
    enabled = set(config.tools.builtin)
    missing = [t for t in (settings.search_tool, settings.fetch_tool) if t not in enabled]
    if missing:
        raise KoboiError(
            f"deep_research calls {' and '.join(missing)}, which tools.builtin does not "
            f"enable; add {', '.join(missing)} to tools.builtin (or name other tools in "
            "research.search_tool / research.fetch_tool)"
        )
    return DeepResearch(settings)
