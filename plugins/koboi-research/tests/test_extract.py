"""What research reads out of search results and pages (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from koboi.runners import Runner
from koboi_research.config import ResearchSection
from koboi_research.extract import candidates, page_text, parse_results, quotes_for, terms
from koboi_research.report import Source, claims_of, quote_claims, render
from koboi_research.runner import DeepResearch
from koboi_testing.contracts import RunnerContract

SEARCH = """Results for 'tides' (backend: offline):
1. What causes tides
   http://127.0.0.1:8000/tides.html
   what causes tides...
2. A file
   corpus/spring.md
"""


def test_results_are_read_from_the_search_tools_text() -> None:
    results = parse_results(SEARCH)
    assert [(r.title, r.address) for r in results] == [
        ("What causes tides", "http://127.0.0.1:8000/tides.html"),
        ("A file", "corpus/spring.md"),
    ]
    assert parse_results("No results for 'x' (backend: offline).") == []


def test_web_fetchs_header_is_not_page_text() -> None:
    fetched = "URL: http://x/\nStatus: 200 OK\nContent-Type: text/html\n\n# Title\n\nBody."
    assert page_text(fetched) == "# Title\n\nBody."
    assert page_text("plain file text") == "plain file text"


def test_quotes_are_verbatim_sentences_sharing_the_questions_words() -> None:
    text = (
        "# Tides\n\nTides are caused by the Moon. The weather was fine that day.\n"
        "- Spring tides happen at full moon and new moon.\n"
    )
    assert candidates(text) == [
        "Tides are caused by the Moon.",
        "The weather was fine that day.",
        "Spring tides happen at full moon and new moon.",
    ]
    assert quotes_for("What causes tides?", text, 2) == ["Tides are caused by the Moon."]
    assert quotes_for("When do spring tides happen?", text, 2) == [
        "Spring tides happen at full moon and new moon."
    ]
    assert all(q in text for q in quotes_for("tides moon", text, 5))
    assert terms("The tides, the tide, causes; caused!") == {"tid", "caus"}


def test_claims_keep_only_valid_citations() -> None:
    claims, dropped = claims_of("# Report\n- One [1]. Two [2][7]. Three.\nFour [9].\n", {1, 2})
    assert [(c.text, c.citations) for c in claims] == [("One [1].", (1,)), ("Two [2].", (2,))]
    assert dropped == ["Three.", "Four [9]."]


def test_the_report_lists_only_the_sources_it_cites() -> None:
    sources = [Source(1, "http://a/", "Alpha is first.", "q"), Source(2, "b.md", "Beta.", "q")]
    text = render("Why?", quote_claims(sources[:1]), sources)
    assert text == (
        '# Why?\n\n- "Alpha is first." [1]\n\n## Sources\n\n[1] http://a/ — "Alpha is first."\n'
    )


class TestDeepResearchRunnerContract(RunnerContract):
    """The runner passes koboi-testing's RunnerContract. The suite's agent has no tools:
    every search is refused at lookup, so the research finds nothing, asks for a reworded
    query each round, and reports that no source was found."""

    @pytest.fixture
    def runner(self) -> Runner:
        return DeepResearch(ResearchSection(max_depth=2))

    @pytest.fixture
    def turns(self) -> list[Any]:
        return ['{"questions": ["why?"]}', "another query"]
