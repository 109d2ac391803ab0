"""The ``context`` section: which strategy keeps a session's requests inside the window.

Only pydantic here, so the plugin registers the model without importing anything
else. The keys ``strategy``, ``max_context_tokens``, ``keep_last``, ``safety_margin``
and ``summarization_truncation`` are those of koboi-agent's ``context`` section.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Strategy = Literal[
    "noop", "truncation", "smart_truncation", "sliding_window", "key_facts", "summarise"
]
STRATEGIES: tuple[str, ...] = (
    "noop",
    "truncation",
    "smart_truncation",
    "sliding_window",
    "key_facts",
    "summarise",
)
TOKENIZERS = ("auto", "heuristic", "cl100k_base", "o200k_base")


class ContextSettings(BaseModel):
    """How each model request of a session is fitted into the model's context window."""

    model_config = ConfigDict(extra="forbid")

    strategy: Strategy = Field(
        default="noop",
        description="noop (send everything; a request over the window stops the run with a "
        "clear error), truncation (drop the oldest turns), smart_truncation (also keep the "
        "first user message), sliding_window (always the last keep_last turns), key_facts "
        "(drop old turns, keep one line per fact of them), summarise (replace old turns by a "
        "summary the model writes, journaled). 'summarize' is accepted too.",
    )
    max_context_tokens: int | None = Field(
        default=None,
        gt=0,
        description="The context window to fit, in tokens; default: what the provider states "
        "(or llm.context_window). Set it lower to keep requests small.",
    )
    reserve_output_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Tokens left free for the answer; default: the smaller of 1024 and an "
        "eighth of the window. Set it to the provider's max_tokens when it has one.",
    )
    safety_margin: int = Field(
        default=0,
        ge=0,
        description="Tokens kept free besides the answer's, for what a provider adds around "
        "messages and tools that the count cannot see.",
    )
    keep_last: int = Field(
        default=4,
        ge=1,
        description="sliding_window: how many of the latest turns (a user message and what "
        "followed it) each request carries, fewer when they do not fit.",
    )
    compact_to: float = Field(
        default=0.6,
        gt=0.0,
        le=1.0,
        description="After a compaction, the share of the room the kept history may fill: "
        "lower compacts less often (each compaction is journaled, and a stable prefix helps "
        "the provider's prompt cache).",
    )
    summary_tokens: int | None = Field(
        default=None,
        gt=0,
        description="summarise: the longest summary, in tokens; default: a fifth of the room.",
    )
    facts_tokens: int | None = Field(
        default=None,
        gt=0,
        description="key_facts: the longest block of facts, in tokens; default: a fifth of the "
        "room.",
    )
    summarization_truncation: int = Field(
        default=1000,
        ge=50,
        description="summarise: each older message is cut to this many characters in what "
        "the model is asked to summarise.",
    )
    summary_prompt: str | None = Field(
        default=None,
        description="summarise: the instructions of the summary call; default: a built-in "
        "prompt that asks for the facts, decisions and open tasks.",
    )
    tokenizer: str = Field(
        default="auto",
        description="How tokens are counted: auto (exact for OpenAI models, else a heuristic "
        "corrected by the provider's reported usage), heuristic, cl100k_base or "
        "o200k_base.",
    )

    @field_validator("strategy", mode="before")
    @classmethod
    def _american_spelling(cls, value: Any) -> Any:
        return "summarise" if value == "summarize" else value

    @field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, value: str) -> str:
        if value not in TOKENIZERS:
            raise ValueError(f"unknown tokenizer {value!r}; use one of: {', '.join(TOKENIZERS)}")
        return value
