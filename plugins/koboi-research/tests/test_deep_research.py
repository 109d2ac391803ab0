"""Deep research on a local corpus served on loopback: every claim of the report maps to
a quote of a page that was really fetched, checked claim by claim."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from koboi import AllowAllApprover, KoboiAgent
from koboi import journal as J
from koboi.store import JournalEvent
from koboi_testing.crash import Died, DyingStore
from koboi_tools_web.html_text import html_to_text

# A real HTTP server (the corpus) serves every test here.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

QUESTIONS = ["What causes tides?", "What are spring tides?", "What are neap tides?"]
REPORT = """Tides are mostly the Moon's doing [1].
The Sun adds a smaller pull [2].
Spring tides come at new and full moon [3][4].
Neap tides are the weakest [5].
The sea is made of cheese.
Tides follow the stock market [99]."""


def research_config(corpus: Any, **research: Any) -> dict[str, Any]:
    extra = research.pop("extra_documents", {})
    return {
        "agent": {"name": "researcher", "runner": "deep_research", "stream": False},
        "llm": {
            "provider": "scripted",
            "rules": [
                {"match": "^Sub-question:", "reply": "quarter moon weak tides"},
                {"match": "^Question:", "reply": REPORT},
                {"match": ".", "reply": json.dumps({"questions": QUESTIONS})},
            ],
        },
        "tools": {"builtin": ["web_search", "web_fetch"]},
        "tools_web": {
            # Loopback is not public: web_fetch reaches it only because it is allowed here.
            "allow_networks": ["127.0.0.1/32"],
            "search": {"backend": "offline", "corpus": corpus.documents(**extra)},
        },
        "research": {"results_per_search": 1, **research},
    }


def make(data: dict[str, Any], **kwargs: Any) -> KoboiAgent:
    kwargs.setdefault("approver", AllowAllApprover())
    return KoboiAgent.from_dict(data, **kwargs)


def events_of(journal: list[JournalEvent], kind: str) -> list[dict[str, Any]]:
    return [dict(e.data) for e in journal if e.type == f"research.{kind}"]


def fetched_text(journal: list[JournalEvent]) -> dict[str, str]:
    """What web_fetch returned for each URL, as the journal has it."""
    urls = {
        e.data["call_id"]: e.data["arguments"]["url"]
        for e in journal
        if e.type == J.TOOL_CALL_STARTED and e.data["name"] == "web_fetch"
    }
    return {
        urls[e.data["call_id"]]: e.data["content"]
        for e in journal
        if e.type == J.TOOL_CALL_FINISHED and e.data["call_id"] in urls and not e.data["is_error"]
    }


def squeeze(text: str) -> str:
    return " ".join(text.split())


def check_every_claim_is_a_fetched_quote(
    report: str, journal: list[JournalEvent], corpus: Any
) -> int:
    """The report's claims each cite a numbered source; each source's quote is in the
    text web_fetch returned for its URL and in the page the server served. Returns how
    many claims were checked."""
    body, _, rest = report.partition("\n## Sources\n")
    sources_part = rest.split("\n## ")[0]
    sources: dict[int, tuple[str, str]] = {}
    for line in sources_part.strip().splitlines():
        match = re.fullmatch(r'\[(\d+)\] (\S+) — "(.*)"', line)
        assert match, f"not a source line: {line!r}"
        sources[int(match[1])] = (match[2], match[3])
    claims = [ln[2:] for ln in body.splitlines() if ln.startswith("- ")]
    assert claims, report
    fetched = fetched_text(journal)
    for claim in claims:
        cited = [int(n) for n in re.findall(r"\[(\d+)\]", claim)]
        assert cited, f"a claim cites nothing: {claim!r}"
        for number in cited:
            assert number in sources, f"{claim!r} cites [{number}], which is not a source"
            url, quote = sources[number]
            assert url in fetched, f"[{number}] {url} was never fetched"
            assert squeeze(quote) in squeeze(fetched[url]), (quote, fetched[url])
            path = "/" + url.split("/", 3)[3]
            title, body_html = corpus.pages[path]
            served = html_to_text(f"<title>{title}</title>{body_html}", url).text
            assert squeeze(quote) in squeeze(served), (quote, served)
    return len(claims)


async def test_every_claim_of_the_report_is_a_quote_of_a_fetched_page(corpus: Any) -> None:
    async with make(research_config(corpus)) as agent:
        result = await agent.run("How do tides work?", session_id="r")
        journal = await agent.store.read("r")
    assert result.outcome == "completed", result.error
    assert check_every_claim_is_a_fetched_quote(result.output, journal, corpus) == 4
    # The claims the model made up are not in the report: journaled as dropped.
    (report,) = events_of(journal, "report")
    assert report["dropped"] == [
        "The sea is made of cheese.",
        "Tides follow the stock market [99].",
    ]
    assert "cheese" not in result.output and "stock market" not in result.output
    # The coverage gate: neap tides had no source after round 1, and a reworded query
    # found one in round 2.
    coverage = events_of(journal, "coverage")
    assert [c["missing"] for c in coverage] == [["What are neap tides?"], []]
    searched = events_of(journal, "searched")
    assert [s["query"] for s in searched] == [*QUESTIONS, "quarter moon weak tides"]
    purposes = [e.data["purpose"] for e in journal if e.type == J.SIDE_CALL_STARTED]
    assert purposes == ["research.plan", "research.refine", "research.report"]
    # Each page was fetched once, through web_fetch (the journal has every call).
    assert corpus.fetched == {
        "/tides.html": 1,
        "/spring.html": 1,
        "/neap-old.html": 1,
        "/quarter.html": 1,
    }


async def test_with_report_quotes_the_claims_are_the_quotes(corpus: Any) -> None:
    async with make(research_config(corpus, report="quotes")) as agent:
        result = await agent.run("How do tides work?", session_id="r")
        journal = await agent.store.read("r")
    assert check_every_claim_is_a_fetched_quote(result.output, journal, corpus) == 5
    assert '- "These weak neap tides have the smallest range of the month." [5]' in result.output


async def test_web_fetch_still_refuses_what_is_not_allowed(corpus: Any) -> None:
    # A result on another loopback address: the SSRF guard refuses it (only 127.0.0.1 is
    # allowed), the research goes on with the pages it may fetch.
    port = corpus.url.rsplit(":", 1)[1]
    data = research_config(
        corpus,
        report="quotes",
        extra_documents={"What causes tides causes tides": f"http://127.0.0.2:{port}/tides.html"},
    )
    async with make(data) as agent:
        result = await agent.run("How do tides work?", session_id="r")
        journal = await agent.store.read("r")
    refused = [f for f in events_of(journal, "fetched") if not f["ok"]]
    assert [f["address"] for f in refused] == [f"http://127.0.0.2:{port}/tides.html"]
    assert "refused" in refused[0]["error"] and "127.0.0.2" not in result.output
    check_every_claim_is_a_fetched_quote(result.output, journal, corpus)


async def test_a_parent_in_plan_mode_fetches_nothing(corpus: Any) -> None:
    data = research_config(corpus, report="quotes")
    data["agent"]["mode"] = "plan"
    async with make(data) as agent:
        result = await agent.run("How do tides work?", session_id="r")
        journal = await agent.store.read("r")
    assert not corpus.fetched  # web_fetch is moderate: the mode refused every call
    refusals = [e for e in journal if e.type == J.TOOL_CALL_REFUSED]
    assert refusals and {e.data["stage"] for e in refusals} == {"mode"}
    assert "## Not covered" in result.output and "- " + QUESTIONS[0] in result.output


async def test_the_budget_ends_the_loop_and_says_what_is_missing(corpus: Any) -> None:
    async with make(research_config(corpus, report="quotes", max_fetches=2)) as agent:
        result = await agent.run("How do tides work?", session_id="r")
        journal = await agent.store.read("r")
    assert result.outcome == "completed"
    assert events_of(journal, "stopped") == [{"reason": "research.max_fetches reached"}]
    assert result.output.endswith("## Not covered\n\n- What are neap tides?\n")
    assert len(corpus.fetched) == 2


async def test_a_killed_research_resumes_without_searching_or_fetching_again(
    corpus: Any,
) -> None:
    async with make(research_config(corpus)) as agent:
        baseline = await agent.run("How do tides work?", session_id="r")
    corpus.fetched.clear()
    # Killed when the third page's fetch would have been journaled as finished.
    seen: list[str] = []

    def dies_at(session: str, event: Any) -> bool:
        if event.type == J.TOOL_CALL_FINISHED and event.data["name"] == "web_fetch":
            seen.append(event.data["call_id"])
            return len(seen) == 3
        return False

    store = DyingStore(dies_at)
    async with make(research_config(corpus), store=store) as agent:
        with pytest.raises(Died):
            await agent.run("How do tides work?", session_id="r")
    store.restart()
    async with make(research_config(corpus), store=store) as agent:
        result = await agent.resume_run("r")
        journal = await store.read("r")
    assert result.output == baseline.output
    # The two pages fetched before are not fetched again; the one in doubt was (web_fetch
    # is idempotent), the fourth once.
    assert corpus.fetched == {
        "/tides.html": 1,
        "/spring.html": 1,
        "/neap-old.html": 2,
        "/quarter.html": 1,
    }
    searches = [
        e for e in journal if e.type == J.TOOL_CALL_STARTED and e.data["name"] == "web_search"
    ]
    assert len(searches) == len({e.data["call_id"] for e in searches}) == 4
    assert [e.type for e in journal].count(J.SIDE_CALL_STARTED) == 3
    assert len(events_of(journal, "planned")) == 1


async def test_orchestrations_deep_research_mode_runs_this_runner(corpus: Any) -> None:
    data = research_config(corpus, report="quotes")
    data["agent"]["runner"] = "orchestration"
    data["orchestration"] = {"execution": {"mode": "deep_research"}}
    async with make(data) as agent:
        result = await agent.run("How do tides work?", session_id="r")
        journal = await agent.store.read("r")
    assert result.outcome == "completed", result.error
    assert check_every_claim_is_a_fetched_quote(result.output, journal, corpus) == 5
