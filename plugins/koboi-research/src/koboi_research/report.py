"""The report: claims, each citing numbered sources, and the sources (address + quote).

The model may write the claims (``research.report: model``) from the numbered
quotes; what it writes is then checked claim by claim: a citation that names
no source is removed, and a claim left without a valid citation is dropped
(and journaled as dropped). With ``report: quotes``, or when nothing the model
wrote survives, the claims are the quotes themselves. Either way every claim
of the report cites at least one source, and every source is an address and a
verbatim quote of what was fetched there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_CITATION = re.compile(r"\[(\d+)\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])|(?<=\])\s+(?=[A-Z])")


@dataclass(frozen=True)
class Source:
    """One numbered source: a quote, the page it was read on, the sub-question it answers."""

    number: int
    address: str
    quote: str
    question: str

    def line(self) -> str:
        return f'[{self.number}] {self.address} — "{self.quote}"'


@dataclass(frozen=True)
class Claim:
    text: str
    citations: tuple[int, ...]


def claims_of(text: str, numbers: set[int]) -> tuple[list[Claim], list[str]]:
    """The claims of a model's report that cite a known source, and the ones dropped."""
    kept: list[Claim] = []
    dropped: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.lower().startswith(("sources", "[1] http")):
            continue
        line = re.sub(r"^([-*•]|\d+[.)])\s+", "", line)
        for sentence in _SENTENCE_END.split(line):
            sentence = sentence.strip()
            if not sentence:
                continue
            cited = tuple(dict.fromkeys(int(n) for n in _CITATION.findall(sentence)))
            valid = tuple(n for n in cited if n in numbers)
            if not valid:
                dropped.append(sentence)
                continue
            # Citations that name no source are taken out; the claim keeps the valid ones.
            cleaned = _CITATION.sub(lambda m, ok=valid: _kept(m, ok), sentence)
            kept.append(Claim(" ".join(cleaned.split()), valid))
    return kept, dropped


def _kept(match: re.Match[str], valid: tuple[int, ...]) -> str:
    return match.group(0) if int(match.group(1)) in valid else ""


def quote_claims(sources: Sequence[Source]) -> list[Claim]:
    """Claims that are the quotes themselves, each citing its source."""
    return [Claim(f'"{s.quote}" [{s.number}]', (s.number,)) for s in sources]


def render(question: str, claims: Sequence[Claim], sources: Sequence[Source]) -> str:
    """The report: the question, one claim per line, then every source cited."""
    cited = {n for c in claims for n in c.citations}
    lines = [f"# {question.strip()}", ""]
    lines += [f"- {c.text}" for c in claims]
    lines += ["", "## Sources", ""]
    lines += [s.line() for s in sources if s.number in cited]
    return "\n".join(lines) + "\n"


def numbered_quotes(sources: Sequence[Source]) -> str:
    """The sources as the model is shown them, grouped by sub-question."""
    out: list[str] = []
    question = None
    for source in sources:
        if source.question != question:
            question = source.question
            out.append(f"\nSub-question: {question}")
        out.append(f'[{source.number}] ({source.address}) "{source.quote}"')
    return "\n".join(out).strip()
