"""Masking secrets in text, in JSON-like data and in streams of text.

A :class:`Redactor` replaces every configured secret (a *literal*, such as the
values :func:`~koboi_governance.detect.secrets_from_env` picks out of the
environment) with ``[REDACTED]`` and every detected secret with
``[REDACTED:<kind>]`` (``[REDACTED:openai_api_key]``); with ``pii=True``
personal data too (``[REDACTED:email]``). Overlapping findings are masked
together, so no part of either survives. Redacting is idempotent:
``redact(redact(x)) == redact(x)``.

A :class:`StreamRedactor` does the same to text that arrives in chunks (a model
streaming its answer, a process writing its output) without ever emitting a
secret split across chunks, not even its first half. Its contract:

    "".join(stream.feed(c) for c in chunks) + stream.flush() == redactor.redact("".join(chunks))

for every way of cutting a text into chunks. It emits at once whatever can no
longer be part of a secret and holds back only a tail that might still become
one: the last word of prose; an unfinished ``password = "…`` or
``Authorization: …`` value; a run of digits that might be a card number; the
start of a configured secret; an open ``-----BEGIN … PRIVATE KEY-----`` block.
What is held back is never longer than :data:`MAX_HELD_CHARS` or the longest
configured secret, whichever is larger.

How the stream decides what is safe: every detector is a regular expression of
bounded length that also describes how an unfinished match looks at the end of
a text (:attr:`~koboi_governance.detect.Detector.tail`). Everything before the
earliest such tail (and before any match reaching into it) is scanned exactly
as it would be in the whole text, so it is redacted now and emitted; the rest
waits for the next chunk. The property is tested with hypothesis over
arbitrary texts and chunkings.

Limits, by design: a value is masked only as far as its pattern reaches (an
unquoted ``password=`` value stops at whitespace or a quote; a private key is
masked through at most 16 KiB of key material, real keys being under 8 KiB);
secrets glued to other secrets without a separator may go undetected; a
secret configured as a literal is masked wherever it occurs, however it is
surrounded.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

from koboi_governance.detect import (
    DETECTORS,
    KINDS,
    MAX_MATCH_CHARS,
    TOKEN_RUN_CHARS,
    Detector,
    check_kinds,
    fold,
    kind_priority,
)

__all__ = [
    "MARKER",
    "MAX_HELD_CHARS",
    "MIN_LITERAL_CHARS",
    "Redactor",
    "StreamRedactor",
    "literal_problem",
    "marker",
]

MARKER = "[REDACTED]"
"""What a configured (literal) secret is replaced with."""

MIN_LITERAL_CHARS = 6
"""Configured secrets shorter than this would mask ordinary words; they are refused."""

MAX_HELD_CHARS = MAX_MATCH_CHARS
"""The most a :class:`StreamRedactor` holds back, unless a configured secret is longer."""

# Characters that end a "word" for the streaming hold-back: ASCII whitespace
# (detectors use ASCII classes) and the brackets no secret pattern contains.
_WORD_BREAKS = " \t\n\r\f\v[]"
# Already emitted characters a stream keeps to evaluate look-behinds (two
# suffice for every pattern; a few more cost nothing).
_CONTEXT_CHARS = 8
_LITERAL_RANK = -1  # a configured secret outranks every detector on a tie


def marker(kind: str | None) -> str:
    """The text that replaces a secret of ``kind`` (``None``: a configured secret)."""
    return MARKER if kind is None else f"[REDACTED:{kind}]"


_MARKERS = (MARKER, *(marker(kind) for kind in KINDS))


def _touches_marker(literal: str) -> bool:
    """True when ``literal`` could occur across a redaction marker and the text next to it."""
    for text in _MARKERS:
        if literal in text or text in literal:
            return True
        for size in range(1, min(len(literal), len(text))):
            if literal.endswith(text[:size]) or literal.startswith(text[-size:]):
                return True
    return False


def literal_problem(secret: str) -> str | None:
    """Why :class:`Redactor` would refuse ``secret`` as a configured secret, or ``None``.

    Lets a caller collecting secrets from many places (config, environment)
    leave the unusable ones to the detectors instead of failing. The reason
    never contains the secret.
    """
    size = len(secret.strip())
    if size < MIN_LITERAL_CHARS:
        return (
            f"it has {size} characters (not counting surrounding whitespace); secrets shorter"
            f" than {MIN_LITERAL_CHARS} characters are refused because masking them would also"
            " mask ordinary text"
        )
    if _touches_marker(secret):
        return (
            f"it begins or ends with part of the redaction marker {MARKER!r} (for example ']'"
            " at its start or '[' at its end), so masking it would not give stable text;"
            " configure the secret without that part"
        )
    return None


def _checked_literals(literals: Iterable[str]) -> tuple[str, ...]:
    if isinstance(literals, str):
        raise TypeError("literals must be a collection of secrets, not a single string")
    checked: set[str] = set()
    for number, literal in enumerate(literals, start=1):
        # Messages name the secret by position: they must never contain it.
        if not isinstance(literal, str):
            raise TypeError(
                f"configured secret #{number} is a {type(literal).__name__}, not a string"
            )
        problem = literal_problem(literal)
        if problem is not None:
            raise ValueError(f"configured secret #{number} is refused: {problem}")
        checked.add(literal)
    return tuple(sorted(checked, key=lambda s: (-len(s), s)))


def _selected_kinds(kinds: Collection[str] | None, pii: bool) -> frozenset[str]:
    if kinds is None:
        chosen = {kind for kind, category in KINDS.items() if category == "secret"}
    else:
        if isinstance(kinds, str):
            raise TypeError("kinds must be a collection of kind names, not a single string")
        check_kinds(kinds)
        flagged = sorted(k for k in kinds if KINDS[k] == "injection")
        if flagged:
            raise ValueError(
                f"{', '.join(flagged)}: injection kinds are reported by guardrails, not redacted;"
                " redact secret and pii kinds only"
            )
        chosen = set(kinds)
    if pii:
        chosen |= {kind for kind, category in KINDS.items() if category == "pii"}
    return frozenset(chosen)


# A span to mask: start, end, rank (lower wins a tie), kind (None: a literal).
_Span = tuple[int, int, int, str | None]


class Redactor:
    """Masks configured secrets and detected secrets (and, with ``pii=True``,
    personal data) in text, JSON-like data and streams.

    ``literals`` are secrets known in advance (API keys from the config or the
    environment); each must have at least :data:`MIN_LITERAL_CHARS`
    characters. ``kinds`` chooses the detectors (see
    :data:`~koboi_governance.detect.KINDS`); ``None`` means every secret kind,
    and ``pii=True`` adds every PII kind. ``kinds=()`` with no literals gives
    an inactive redactor that returns text unchanged.

    ``max_held_chars`` is the most a stream of this redactor ever holds back.
    """

    def __init__(
        self,
        *,
        literals: Iterable[str] = (),
        kinds: Collection[str] | None = None,
        pii: bool = False,
    ) -> None:
        self._literals = _checked_literals(literals)
        self._kinds = _selected_kinds(kinds, pii)
        self._detectors: tuple[Detector, ...] = tuple(d for d in DETECTORS if d.kind in self._kinds)
        tails: dict[str, tuple[re.Pattern[str], int, tuple[str, ...]]] = {}
        for detector in self._detectors:
            if detector.tail is not None and detector.tail not in tails:
                tails[detector.tail] = (
                    re.compile(f"(?:{detector.tail})\\Z", re.ASCII),
                    detector.tail_chars,
                    detector.tail_hints,
                )
        self._tails = tuple(tails.values())
        # For each literal: the lengths k (longest first) for which its first k
        # characters end with a given character, to test "the text ends with the
        # start of this secret" in a few comparisons.
        self._literal_starts: tuple[tuple[str, dict[str, tuple[int, ...]]], ...] = tuple(
            (literal, _prefix_lengths_by_last_char(literal)) for literal in self._literals
        )
        self.max_held_chars = max([MAX_HELD_CHARS, *(len(s) for s in self._literals)])
        # The common case is an ASCII string holding nothing sensitive (ids, keys, tool
        # names, prose): if it contains none of the substrings some detector requires,
        # and no literal, nothing can match. Plain substring tests beat one big
        # alternation regex (which re tries at every position).
        self._all_hinted = all((d.hints or d.anchors or d.non_ascii_only) for d in self._detectors)
        self._hints = tuple(sorted({h for d in self._detectors for h in (d.hints or d.anchors)}))
        self._detector_hints = tuple((d, frozenset(d.hints or d.anchors)) for d in self._detectors)

    def __repr__(self) -> str:  # never shows the secrets themselves
        return f"Redactor(literals={len(self._literals)}, kinds={sorted(self._kinds)})"

    @property
    def active(self) -> bool:
        """False when there is nothing to redact, so callers can skip the work."""
        return bool(self._literals or self._detectors)

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds this redactor masks."""
        return self._kinds

    # ------------------------------------------------------------------ public

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by its marker."""
        if not self.active or not text:
            return text
        if self._clearly_clean(text):
            return text
        spans, _ = self._scan(text, 0)
        return self._render(text, 0, len(text), spans)

    def redact_data(self, obj: Any) -> Any:
        """A deep copy of JSON-like ``obj`` with every string redacted, dict keys included.

        Dicts, lists and tuples are copied; strings are redacted; any other value
        is returned as it is. When two keys of one dict redact to the same text,
        the later one gets a ``#2``, ``#3``… suffix, so no entry is lost.
        """
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, dict):
            copied: dict[Any, Any] = {}
            for key, value in obj.items():
                new_key = self.redact(key) if isinstance(key, str) else key
                if new_key in copied:
                    base, number = new_key, 2
                    while f"{base}#{number}" in copied:
                        number += 1
                    new_key = f"{base}#{number}"
                copied[new_key] = self.redact_data(value)
            return copied
        if isinstance(obj, list):
            return [self.redact_data(item) for item in obj]
        if isinstance(obj, tuple):
            return tuple(self.redact_data(item) for item in obj)
        return obj

    def _holds_nothing(self, text: str) -> bool:
        """True when redacting ``text`` would change nothing."""
        return self._clearly_clean(text) or not self._scan(text, 0)[0]

    def _clearly_clean(self, text: str) -> bool:
        """True when ``text`` can hold no finding and no literal (a cheap, exact test)."""
        if not self._all_hinted or not text.isascii():
            return False
        folded = text.lower()
        if any(hint in folded for hint in self._hints):
            return False
        return not any(literal in text for literal in self._literals)

    def redact_json(self, obj: Any, *, known_keys: Collection[str] = ()) -> Any:
        """:meth:`redact_data`, except that a value with nothing to mask is returned
        as it is, not copied: for callers that neither keep nor change the result
        (the kernel, which stores a serialised copy anyway).

        One test over all the strings of the value at once, instead of one per
        string: a journal event is a dozen short strings that almost never hold
        anything. ``known_keys`` are dict keys the caller's own schema uses (the
        journal's field names): they are left out of that test, since masking
        them would change nothing anyway; every value under them is tested.
        """
        if isinstance(obj, dict | list):
            parts: list[str] = []
            if self._collect(obj, known_keys, parts):
                # Each string verbatim, set off by quotes, which every detector treats as
                # it treats the ends of a text: what would be masked in one of the
                # strings is masked in the whole text too. A masked match that spans
                # strings only sends us the slow way.
                text = '"' + '" "'.join(parts) + '"'
                if self._holds_nothing(text):
                    return obj
        return self.redact_data(obj)

    @classmethod
    def _collect(cls, obj: Any, known_keys: Collection[str], parts: list[str]) -> bool:
        """Gather the strings :meth:`redact_data` would redact; False for other objects."""
        if isinstance(obj, str):
            parts.append(obj)
            return True
        if isinstance(obj, dict):
            for key, value in obj.items():
                if isinstance(key, str):
                    if key not in known_keys:
                        parts.append(key)
                elif not (key is None or isinstance(key, int | float)):
                    return False
                if not cls._collect(value, known_keys, parts):
                    return False
            return True
        if isinstance(obj, list | tuple):
            return all(cls._collect(item, known_keys, parts) for item in obj)
        return obj is None or isinstance(obj, int | float)

    def stream(self) -> StreamRedactor:
        """A new :class:`StreamRedactor` masking what this redactor masks."""
        return StreamRedactor(self)

    # ------------------------------------------------------------------ engine

    def _scan(self, window: str, lo: int) -> tuple[list[_Span], list[tuple[int, int]]]:
        """Spans to mask in ``window[lo:]``, and the extents a stream may not cut inside
        (every whole match a finding came from, and every literal occurrence)."""
        spans: list[_Span] = []
        barriers: list[tuple[int, int]] = []
        if self._detectors:
            folded = fold(window)
            # Which required substrings the text holds, found once for every detector.
            present = frozenset(h for h in self._hints if h in folded) if window.isascii() else None
            for detector, needs in self._detector_hints:
                if present is not None and not detector.non_ascii_only:
                    if needs and present.isdisjoint(needs):
                        continue
                elif not detector.applies(window, folded):
                    continue
                for raw_start, raw_end, finding in detector.scan(window, lo, folded):
                    barriers.append((raw_start, raw_end))
                    spans.append(
                        (finding.start, finding.end, kind_priority(finding.kind), finding.kind)
                    )
        for literal in self._literals:
            # Every occurrence, overlapping ones too: a set that does not depend
            # on where a scan started, as a stream requires.
            index = window.find(literal, lo)
            while index >= 0:
                spans.append((index, index + len(literal), _LITERAL_RANK, None))
                barriers.append((index, index + len(literal)))
                index = window.find(literal, index + 1)
        return spans, barriers

    @staticmethod
    def _render(window: str, lo: int, hi: int, spans: list[_Span]) -> str:
        """``window[lo:hi]`` with each group of overlapping spans replaced by one marker,
        named after the longest span of the group."""
        chosen = sorted(s for s in spans if s[0] < hi)
        parts: list[str] = []
        position = lo
        index = 0
        while index < len(chosen):
            start, end, rank, kind = chosen[index]
            best = (start - end, rank, kind)
            index += 1
            while index < len(chosen) and chosen[index][0] < end:
                other_start, other_end, other_rank, other_kind = chosen[index]
                end = max(end, other_end)
                best = min(best, (other_start - other_end, other_rank, other_kind), key=_label_key)
                index += 1
            parts.append(window[position:start])
            parts.append(marker(best[2]))
            position = end
        parts.append(window[position:hi])
        return "".join(parts)

    def _hold(self, window: str, lo: int) -> int:
        """Where the tail that might still become a secret starts (``len(window)`` if none)."""
        size = len(window)
        hold = size
        if self._detectors:
            # The last word: every pattern without whitespace ends inside it.
            region = max(lo, size - TOKEN_RUN_CHARS)
            last_break = max(window.rfind(c, region) for c in _WORD_BREAKS)
            hold = last_break + 1 if last_break >= 0 else region
            folded = fold(window) if any(t[2] for t in self._tails) else window
            for pattern, chars, hints in self._tails:
                if hints and not any(hint in folded for hint in hints):
                    continue
                found = pattern.search(window, max(lo, size - chars))
                if found is not None and found.start() < hold:
                    hold = found.start()
        if self._literals and size > lo:
            last = window[-1]
            for literal, starts in self._literal_starts:
                for length in starts.get(last, ()):
                    if length <= size - lo and window.endswith(literal[:length]):
                        hold = min(hold, size - length)
                        break
        return max(hold, lo)

    def _cut(self, window: str, lo: int, *, final: bool) -> tuple[int, list[_Span]]:
        """How far ``window`` (already emitted up to ``lo``) can be emitted now, and the
        spans to mask in it."""
        size = len(window)
        hold = size if final else self._hold(window, lo)
        if hold <= lo:
            return lo, []
        spans, barriers = self._scan(window, lo)
        cut = hold
        if not final:
            # Never cut inside a candidate match or a literal: the scan of the
            # rest must start where the scan of the whole text would.
            moved = True
            while moved:
                moved = False
                for start, end in barriers:
                    if start < cut < end:
                        cut = start
                        moved = True
        return cut, spans


def _label_key(item: tuple[int, int, str | None]) -> tuple[int, int]:
    return item[0], item[1]


def _prefix_lengths_by_last_char(literal: str) -> dict[str, tuple[int, ...]]:
    lengths: dict[str, list[int]] = {}
    for length in range(len(literal) - 1, 0, -1):
        lengths.setdefault(literal[length - 1], []).append(length)
    return {char: tuple(values) for char, values in lengths.items()}


class StreamRedactor:
    """Redacts text arriving in chunks; made by :meth:`Redactor.stream`.

    :meth:`feed` returns the part of the text so far that is safe to emit;
    :meth:`flush` ends the stream and returns the rest. Their concatenation is
    exactly ``redactor.redact(whole_text)``. After :meth:`flush` the object is
    ready for a new stream.
    """

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._context = ""  # the last characters already emitted, unredacted
        self._pending = ""  # received, not yet emitted

    def __repr__(self) -> str:
        return f"StreamRedactor(held_chars={len(self._pending)})"

    @property
    def held_chars(self) -> int:
        """How many received characters are held back, waiting to be known safe."""
        return len(self._pending)

    def feed(self, chunk: str) -> str:
        """Take the next ``chunk``; return the text that is now safe to emit (maybe ``""``)."""
        if not isinstance(chunk, str):
            raise TypeError(f"feed() takes text (str), not {type(chunk).__name__}")
        if not self._redactor.active:
            return chunk
        if not chunk:
            return ""
        window = self._context + self._pending + chunk
        lo = len(self._context)
        cut, spans = self._redactor._cut(window, lo, final=False)
        if cut <= lo:
            self._pending += chunk
            return ""
        emitted = self._redactor._render(window, lo, cut, spans)
        self._context = window[max(0, cut - _CONTEXT_CHARS) : cut]
        self._pending = window[cut:]
        return emitted

    def flush(self) -> str:
        """End the stream: the rest of the text, redacted."""
        window = self._context + self._pending
        lo = len(self._context)
        self._context = self._pending = ""
        if len(window) == lo:
            return ""
        _, spans = self._redactor._cut(window, lo, final=True)
        return self._redactor._render(window, lo, len(window), spans)
