"""The eval check ``retrieved_chunk(...)``: a retrieval returned a matching chunk.

It reads the session's ``rag.retrieved`` events (journaled for each ``rag__search``
call and each time context was added), so it judges what was really retrieved in
the run, replayed or not.
"""

from __future__ import annotations

from koboi_eval import Check, CheckResult, Trace
from koboi_eval.checks import call_label
from koboi_eval.errors import EvalDefinitionError


class RetrievedChunk(Check):
    def __init__(
        self, text: str | None, source: str | None, via: str | None, top: int | None
    ) -> None:
        self.text, self.source, self.via, self.top = text, source, via, top

    @property
    def label(self) -> str:
        named = {
            k: v for k, v in (("source", self.source), ("via", self.via), ("top", self.top)) if v
        }
        return call_label("retrieved_chunk", *([self.text] if self.text else []), **named)

    def check(self, trace: Trace) -> CheckResult:
        seen: list[str] = []
        for event in trace.plugin_events("rag.retrieved"):
            if self.via and event.get("via") != self.via:
                continue
            results = event.get("results") or []
            for item in results[: self.top] if self.top else results:
                if not isinstance(item, dict):
                    continue
                source = str(item.get("source", ""))
                text = str(item.get("text", ""))
                seen.append(f"{source}#{item.get('position')}")
                if self.source and self.source not in source:
                    continue
                if self.text and self.text.casefold() not in text.casefold():
                    continue
                return self.passed()
        wanted = " ".join(
            part
            for part in (
                f"text containing {self.text!r}" if self.text else "",
                f"from a source containing {self.source!r}" if self.source else "",
            )
            if part
        )
        return self.failed(
            f"a retrieved chunk with {wanted}", f"retrieved: {', '.join(seen) or 'nothing'}"
        )


def retrieved_chunk(
    text: str | None = None,
    *,
    source: str | None = None,
    via: str | None = None,
    top: int | None = None,
) -> Check:
    """A chunk whose text contains ``text`` (case-insensitive) and whose source contains
    ``source`` was retrieved (``via``: ``"tool"`` or ``"context"``; ``top``: among the
    first N results of a retrieval)."""
    if not text and not source:
        raise EvalDefinitionError(
            "retrieved_chunk(): give the text the chunk must contain, its source, or both"
        )
    for name, value in (("text", text), ("source", source)):
        if value is not None and not isinstance(value, str):
            raise EvalDefinitionError(f"retrieved_chunk(): {name} must be a string")
    if via not in (None, "tool", "context"):
        raise EvalDefinitionError("retrieved_chunk(): via must be 'tool' or 'context'")
    if top is not None and (not isinstance(top, int) or top < 1):
        raise EvalDefinitionError("retrieved_chunk(): top must be a whole number >= 1")
    return RetrievedChunk(text, source, via, top)
