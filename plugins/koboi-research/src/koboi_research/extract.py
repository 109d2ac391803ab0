"""What research reads: search results, a fetched page's text, and the quotes in it.

Everything here is a pure function of its input, so a resumed or replayed run
reaches the same sources and quotes. A quote is always a verbatim piece of
the text the fetch tool returned (one sentence, or one line of a list or a
heading-less paragraph), never a paraphrase: that is what lets every claim of
the report be traced to a page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RESULT_HEAD = re.compile(r"^(\d+)\. (.*)$")
_WORD = re.compile(r"[^\W_]+")
#: Where a sentence may end inside a line: after . ! ? followed by a space and a capital.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")
_MIN_QUOTE, _MAX_QUOTE = 25, 400

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
    ]
)


@dataclass(frozen=True)
class Result:
    """One search result: where it is (a URL, or a path for a file tool) and its title."""

    title: str
    address: str


def parse_results(text: str) -> list[Result]:
    """Results out of a search tool's text: ``N. title`` then the address, indented (the
    format of koboi-tools-web's web_search)."""
    lines = text.splitlines()
    found: list[Result] = []
    for index, line in enumerate(lines[:-1]):
        head = _RESULT_HEAD.match(line.strip())
        following = lines[index + 1]
        if head and following.startswith("   ") and following.strip():
            address = following.strip()
            if " " not in address and address not in {r.address for r in found}:
                found.append(Result(head.group(2).strip(), address))
    return found


def page_text(content: str) -> str:
    """A fetched page's text: web_fetch's header (``URL:``, ``Status:``...) left out."""
    if content.startswith("URL: "):
        _, _, body = content.partition("\n\n")
        return body
    return content


def terms(text: str) -> set[str]:
    """The words that carry meaning: lower-cased, no stopwords, three letters or more,
    each cut to a crude stem (``tides``/``tide``, ``caused``/``causes`` meet)."""
    return {
        _stem(w) for w in (m.group(0).casefold() for m in _WORD.finditer(text))
        if len(w) >= 3 and w not in STOPWORDS
    }  # fmt: skip


def _stem(word: str) -> str:
    """A matching key, not a word: common endings cut (never below three letters)."""
    for ending in ("ing", "ed", "es", "s", "e"):
        if word.endswith(ending) and len(word) - len(ending) >= 3 and not word.endswith("ss"):
            return word[: -len(ending)]
    return word


def candidates(text: str) -> list[str]:
    """The pieces of ``text`` a quote may be: sentences of each line (a list's ``-``
    left out; headings are titles, not claims), each a verbatim substring of ``text``."""
    pieces: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"^([-*•]|\d+[.)])\s+", "", line)
        for sentence in _SENTENCE_END.split(line):
            sentence = sentence.strip()
            if _MIN_QUOTE <= len(sentence) <= _MAX_QUOTE:
                pieces.append(sentence)
    return pieces


def quotes_for(question: str, text: str, limit: int) -> list[str]:
    """The ``limit`` pieces of ``text`` that share the most meaning words with
    ``question`` (at least two, or all of them when it has fewer), best first; ties keep
    the page's order."""
    wanted = terms(question)
    if not wanted:
        return []
    needed = min(2, len(wanted))
    scored: list[tuple[int, int, str]] = []
    for position, piece in enumerate(candidates(text)):
        score = len(wanted & terms(piece))
        if score >= needed:
            scored.append((-score, position, piece))
    scored.sort()
    chosen: list[str] = []
    for _, _, piece in scored:
        if piece not in chosen:
            chosen.append(piece)
        if len(chosen) == limit:
            break
    return chosen
