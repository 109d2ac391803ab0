"""The ``research:`` config section (koboi-agent's keys where they mean the same).

Only pydantic here: loading the plugin stays cheap.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ResearchSection(BaseModel):
    """Deep research (``agent.runner: deep_research``): plan, search, fetch, extract, a
    coverage gate, and a report whose every claim cites a fetched source."""

    model_config = ConfigDict(extra="forbid")

    max_depth: int = Field(
        default=3,
        ge=1,
        le=10,
        description="Rounds of the coverage loop: each searches again for the sub-questions "
        "that have no source yet.",
    )
    max_searches: int = Field(default=15, ge=1, le=500, description="Most searches in a run.")
    max_fetches: int = Field(default=20, ge=1, le=500, description="Most pages fetched in a run.")
    max_sub_questions: int = Field(
        default=5, ge=1, le=20, description="Most sub-questions the plan may have."
    )
    results_per_search: int = Field(
        default=5, ge=1, le=20, description="Results asked of each search."
    )
    quotes_per_source: int = Field(
        default=2, ge=1, le=10, description="Most quotes kept from one page for one sub-question."
    )
    coverage_threshold: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Share of the sub-questions that must have a source before the loop stops "
        "early (1.0: every one).",
    )
    citations: Literal["numbered"] = Field(
        default="numbered", description="How claims cite sources: [n], listed under Sources."
    )
    report: Literal["model", "quotes"] = Field(
        default="model",
        description="model: the model writes the report from the numbered quotes (claims "
        "without a valid citation are dropped); quotes: the report is the quotes themselves.",
    )
    search_tool: str = Field(
        default="web_search",
        description="The tool that searches (called with query and max_results); it must be "
        "enabled in tools.builtin.",
    )
    fetch_tool: str = Field(
        default="web_fetch",
        description="The tool that fetches a result (web_fetch: through its SSRF guard); it "
        "must be enabled in tools.builtin.",
    )
    fetch_argument: str = Field(
        default="url",
        description="The fetch tool's argument the result's address goes in (url for "
        "web_fetch, path for read_file).",
    )

    @model_validator(mode="after")
    def _different_tools(self) -> ResearchSection:
        if self.search_tool == self.fetch_tool:
            raise ValueError("search_tool and fetch_tool must be two different tools")
        return self
