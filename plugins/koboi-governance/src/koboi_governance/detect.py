"""Finding secrets, personal data and prompt-injection attempts in text.

What is a *secret* is the kernel's one definition (:mod:`koboi.secrets`: its
detectors, its engine); this module adds the governance categories, personal
data and prompt injection, built on that engine, and the one :func:`find` over
all three.

:func:`find` reports *where* something sensitive is (a :class:`Finding` holds a
kind, a category and a span, never the matched value, so findings can be
logged, journaled and shown safely). Three categories:

- ``secret``: credentials recognisable by their shape (provider API keys, cloud
  and forge tokens, JWTs, ``Authorization`` values, PEM private keys,
  passwords in URLs) and values assigned to secret-looking names
  (``password=…``, ``"api_key": "…"``; only the value is the finding);
- ``pii``: e-mail addresses, phone numbers, payment card numbers (Luhn and
  issuer checked), IBANs (mod-97 and length checked), US social security
  numbers (valid ranges only);
- ``injection``: heuristics for text that tries to take over a model
  ("ignore previous instructions", chat-template role markers, invisible
  Unicode tag characters…).

Each detector is one compiled regular expression plus, where a shape alone is
too weak, a check of the matched text (checksums, issuer prefixes,
placeholders, "is this a word or a name in code rather than a credential").
Speed comes from not running most of them: a detector whose *anchors* (what
every match starts with, such as ``sk-`` or ``password``) or *hints* do not
occur in the text is skipped, and an anchored one is tried only where its
anchors are, so ordinary prose costs a few substring searches (about 60 µs for
1 KB and 4 ms for 100 KB of secret detection on one core).

The secret and PII detectors also describe how an unfinished match can look at
the end of a text (:attr:`Detector.tail`): the streaming redactor in
:mod:`koboi_governance.redact` holds such a tail back until it knows whether it
is a secret. Every detector is bounded in length (see :data:`MAX_MATCH_CHARS`),
which bounds what a stream ever holds back.

Boundary rule shared by every secret and PII pattern: a match never starts
right after ``]`` nor ends right before ``[`` (numbers: not even across a
separator), and no value runs into ``[REDACTED``. Redaction markers look like ``[REDACTED:kind]``, so this keeps
redacted text from yielding new matches next to its markers: redacting twice
gives the same text as redacting once.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType
from typing import Literal

from koboi.secrets import (
    MAX_MATCH_CHARS,
    SECRET_DETECTORS,
    TOKEN_RUN_CHARS,
    Detector,
    Finding,
    fold,
    looks_like_placeholder,
    make_detector,
    non_overlapping,
    secret_values,
)

__all__ = [
    "CATEGORIES",
    "DETECTORS",
    "KINDS",
    "MAX_MATCH_CHARS",
    "TOKEN_RUN_CHARS",
    "Category",
    "Detector",
    "Finding",
    "check_kinds",
    "detectors_for",
    "find",
    "fold",
    "kind_priority",
    "looks_like_placeholder",
    "secrets_from_env",
]

Category = Literal["secret", "pii", "injection"]
CATEGORIES: tuple[Category, ...] = ("secret", "pii", "injection")


# The digits-and-separators shapes of phone, card and SSN numbers, unfinished.
_NUMBER_TAIL = r"[+(0-9][0-9 ().\-]{0,150}"
_LETTERS_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_detector = make_detector
_SECRET_DETECTORS = SECRET_DETECTORS


def secrets_from_env(environ: Mapping[str, str]) -> list[str]:
    """The values of ``environ`` that are secrets (:func:`koboi.secrets.secret_values`)."""
    return secret_values(environ)


# --------------------------------------------------------------------------- PII checks


def _luhn_ok(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        digit = ord(char) - 48
        if index % 2:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def _issuer_ok(digits: str) -> bool:
    """The number starts like a card of a real network and has that network's length."""
    n = len(digits)
    two, three, four = int(digits[:2]), int(digits[:3]), int(digits[:4])
    if digits[0] == "4":  # Visa
        return n in (13, 16, 19)
    if 51 <= two <= 55 or 2221 <= four <= 2720:  # Mastercard
        return n == 16
    if two in (34, 37):  # American Express
        return n == 15
    if two in (36, 38, 39) or 300 <= three <= 305:  # Diners Club
        return 14 <= n <= 19
    if 3528 <= four <= 3589:  # JCB
        return 16 <= n <= 19
    if two == 50 or 56 <= two <= 58:  # Maestro
        return 13 <= n <= 19
    if digits[0] == "6":  # Discover, UnionPay, Maestro
        return 16 <= n <= 19
    return False


def _card_ok(value: str) -> bool:
    digits = "".join(c for c in value if c.isdigit())
    return _issuer_ok(digits) and _luhn_ok(digits)


# Lengths of IBANs by country (the SWIFT IBAN registry).
_IBAN_LENGTHS: Mapping[str, int] = {
    **dict.fromkeys(["NO"], 15),
    **dict.fromkeys(["BE"], 16),
    **dict.fromkeys(["DK", "FI", "FO", "GL", "NL", "SD", "FK"], 18),
    **dict.fromkeys(["MK", "SI"], 19),
    **dict.fromkeys(["AT", "BA", "EE", "KZ", "LT", "LU", "XK", "MN"], 20),
    **dict.fromkeys(["CH", "HR", "LI", "LV"], 21),
    **dict.fromkeys(["BG", "BH", "CR", "DE", "GB", "GE", "IE", "ME", "RS", "VA"], 22),
    **dict.fromkeys(["AE", "GI", "IL", "IQ", "TL", "SO", "OM"], 23),
    **dict.fromkeys(["AD", "CZ", "ES", "MD", "PK", "RO", "SA", "SE", "SK", "TN", "VG"], 24),
    **dict.fromkeys(["PT", "ST", "LY"], 25),
    **dict.fromkeys(["IS", "TR"], 26),
    **dict.fromkeys(["FR", "GR", "IT", "MC", "MR", "SM", "BI", "DJ"], 27),
    **dict.fromkeys(["AL", "AZ", "BY", "CY", "DO", "GT", "HU", "LB", "PL", "SV", "NI", "HN"], 28),
    **dict.fromkeys(["BR", "EG", "PS", "QA", "UA"], 29),
    **dict.fromkeys(["JO", "KW", "MU", "YE"], 30),
    **dict.fromkeys(["MT", "SC"], 31),
    **dict.fromkeys(["LC"], 32),
    **dict.fromkeys(["RU"], 33),
}


def _iban_ok(value: str) -> bool:
    compact = value.replace(" ", "")
    if _IBAN_LENGTHS.get(compact[:2]) != len(compact):
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


_IPV4_LIKE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_DATE_LIKE = re.compile(r"(?:19|20)\d\d[-./ ]\d{1,2}[-./ ]\d{1,2}(?:\D|$)")


def _phone_ok(value: str) -> bool:
    digits = sum(c.isdigit() for c in value)
    if not 10 <= digits <= 15 or _IPV4_LIKE.fullmatch(value) or _DATE_LIKE.match(value):
        return False
    groups = [g for g in re.split(r"[^0-9]+", value) if g]
    # Pairs of digits ("06 12 34 56 78") are a phone number only with a trunk
    # prefix; otherwise they are bytes of a hex dump or a list of small numbers.
    return not all(len(g) == 2 for g in groups) or (groups[0][0] == "0" and groups[0][1] != "0")


_PII_DETECTORS = (
    _detector(
        "email",
        "pii",
        r"(?<![A-Za-z0-9._%+\-\]])[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}@"
        r"(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.){1,8}[A-Za-z]{2,24}"
        r"(?![A-Za-z0-9\-\[])",
        anchors=["@"],
        back=_LETTERS_DIGITS + "._%+-",
        back_max=64,
    ),
    _detector(
        "phone_number",
        "pii",
        # International: +CC then digits, optionally grouped ("+1 (415) 555-0100").
        r"(?<![A-Za-z0-9_+\]])(?<![\d\]][ .\-])\+[1-9](?:[ .\-]?(?:\(\d{1,4}\)|\d)){7,17}"
        r"(?![A-Za-z0-9_\[]|[ .\-]?[\d\[])",
        accept=_phone_ok,
        anchors=["+"],
        tail=_NUMBER_TAIL,
        tail_chars=160,
    ),
    # National formats need separators ("(415) 555-0100", "020 7946 0958",
    # "06 12 34 56 78"): a bare run of digits is a timestamp or an id. Patterns
    # that cannot be anchored start with their first character and check what
    # precedes it just after, so the regex engine can skip ahead to candidates.
    _detector(
        "phone_number",
        "pii",
        r"\((?<![A-Za-z0-9_+.\-\]]\()(?<![\d\]][ .\-]\()\d{2,5}\)[ .\-]?\d{2,4}(?:[ .\-]\d{2,4}){1,4}"
        r"(?![A-Za-z0-9_\[]|[ .\-]?[\d\[])",
        accept=_phone_ok,
        tail=_NUMBER_TAIL,
        tail_chars=160,
    ),
    _detector(
        "phone_number",
        "pii",
        r"\d(?<![A-Za-z0-9_+.\-\]]\d)(?<![\d\]][ .\-]\d)\d{1,4}[ .\-]\d{2,4}(?:[ .\-]\d{2,4}){1,4}"
        r"(?![A-Za-z0-9_\[]|[ .\-]?[\d\[])",
        accept=_phone_ok,
        tail=_NUMBER_TAIL,
        tail_chars=160,
    ),
    _detector(
        "payment_card",
        "pii",
        r"\d(?<![A-Za-z0-9_.\-\]]\d)(?<![\d\]][ \-]\d)(?:[ \-]?\d){12,18}(?![A-Za-z0-9_\[]|[ \-]?[\d\[])",
        accept=_card_ok,
        tail=_NUMBER_TAIL,
        tail_chars=160,
    ),
    _detector(
        "iban",
        "pii",
        r"[A-Z](?<![A-Za-z0-9_\]][A-Z])[A-Z]\d{2}"
        r"(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,4})?)(?![A-Za-z0-9_\[])",
        accept=_iban_ok,
        tail=r"[A-Z]{2}[0-9]{2}[A-Z0-9 ]{0,45}",
        tail_chars=60,
    ),
    _detector(
        "us_ssn",
        "pii",
        # Area 000, 666 and 900-999, group 00 and serial 0000 are never issued.
        r"\d(?<![A-Za-z0-9_\-\]]\d)(?<![\d\]][ \-]\d)\d\d(?<!000|666)(?<!9\d\d)-\d\d(?<!00)-\d{4}(?<!0000)"
        r"(?![A-Za-z0-9_\[]|-[\d\[])",
        hints=["-"],
        tail=_NUMBER_TAIL,
        tail_chars=160,
    ),
)

# Injection heuristics read prose, so whitespace and case are Unicode-aware
# ("ignore\u00a0previous instructions" is still caught).
_INJECTION_FLAGS = re.IGNORECASE
_INJECTION_DETECTORS = (
    _detector(
        "instruction_override",
        "injection",
        r"\b(?:ignore|disregard|forget|override|bypass|skip)\s+"
        r"(?:(?:all|any|every|each|the|your|my|of|these|those)\s+){0,3}"
        r"(?:(?:previous|prior|above|earlier|preceding|foregoing|original|initial|system|existing)\s+){1,2}"
        r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|messages?|context|commands?)\b",
        flags=_INJECTION_FLAGS,
        anchors=["ignore", "disregard", "forget", "override", "bypass", "skip"],
    ),
    _detector(
        "role_override",
        "injection",
        r"\byou\s+are\s+now\s+(?:an?|the|my|acting|going\s+to|free|unrestricted|unfiltered"
        r"|uncensored|jailbroken|dan|in\s+\w+\s+mode)\b"
        r"|\byou\s+are\s+no\s+longer\s+(?:bound|restricted|limited|an?\s+(?:ai|assistant))\b",
        flags=_INJECTION_FLAGS,
        anchors=["you"],
    ),
    _detector(
        "new_instructions",
        "injection",
        r"\b(?:new|updated|revised|real|actual|true|additional|override)\s+(?:system\s+)?"
        r"(?:instructions?|directives?|system\s+prompt)\s*:",
        flags=_INJECTION_FLAGS,
        anchors=["new", "updated", "revised", "real", "actual", "true", "additional", "override"],
    ),
    _detector(
        "system_prompt_request",
        "injection",
        r"\b(?:reveal|print|show|display|output|repeat|leak|dump|expose|recite|tell\s+me|give\s+me"
        r"|write\s+out)\s+(?:me\s+)?(?:(?:your|the|all|of|entire|full|whole|original|initial|hidden"
        r"|secret|exact)\s+){0,4}(?:system\s+(?:prompt|message|instructions)"
        r"|(?:initial|hidden|original)\s+(?:instructions|prompt))"
        r"|\bwhat\s+(?:is|are|was|were)\s+your\s+(?:system\s+prompt"
        r"|(?:initial|original|hidden)\s+instructions)",
        flags=_INJECTION_FLAGS,
        anchors=[
            "reveal",
            "print",
            "show",
            "display",
            "output",
            "repeat",
            "leak",
            "dump",
            "expose",
            "recite",
            "tell",
            "give",
            "write",
            "what",
        ],
    ),
    _detector(
        "chat_template_marker",
        "injection",
        r"<\|(?:im_start|im_end|im_sep|system|user|assistant|endoftext|begin_of_text|end_of_text"
        r"|start_header_id|end_header_id|eot_id)\|>|\[/?INST\]|<</?SYS>>"
        r"|^[ \t]*\#{2,4}[ \t]*(?:system|instruction|instructions|assistant|user)[ \t]*:",
        flags=_INJECTION_FLAGS | re.MULTILINE,
        hints=["<|", "inst]", "sys>>", "##"],
    ),
    _detector(
        "unicode_tags",
        "injection",
        # Tag characters render as nothing and smuggle ASCII past a human reader.
        "[\U000e0000-\U000e007f]+",
        flags=0,
        non_ascii_only=True,
    ),
    _detector(
        "zero_width_run",
        "injection",
        # One zero-width joiner is ordinary (emoji sequences); four in a row hide text.
        "[\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e]{4,}",
        flags=0,
        non_ascii_only=True,
    ),
)

DETECTORS: tuple[Detector, ...] = _SECRET_DETECTORS + _PII_DETECTORS + _INJECTION_DETECTORS

KINDS: Mapping[str, str] = MappingProxyType({d.kind: d.category for d in DETECTORS})
"""Every kind a detector reports, mapped to its category, in priority order (an
earlier kind wins a tie between two findings of the same span)."""

_PRIORITY = {kind: index for index, kind in enumerate(KINDS)}


def kind_priority(kind: str) -> int:
    """Lower is preferred when two findings cover the same span."""
    return _PRIORITY[kind]


def check_kinds(names: Iterable[str]) -> None:
    """Raise ``ValueError`` naming the valid kinds when one of ``names`` is unknown."""
    for name in names:
        if name not in KINDS:
            close = difflib.get_close_matches(str(name), list(KINDS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown detector kind {name!r}{hint}; valid kinds: {', '.join(KINDS)}"
            )


def _check_categories(categories: Iterable[str]) -> None:
    for category in categories:
        if category not in CATEGORIES:
            raise ValueError(
                f"unknown category {category!r}; valid categories: {', '.join(CATEGORIES)}"
            )


def detectors_for(
    categories: Collection[str] = CATEGORIES, kinds: Collection[str] | None = None
) -> tuple[Detector, ...]:
    """The detectors of ``categories``, narrowed to ``kinds`` when given."""
    for name, value in (("categories", categories), ("kinds", kinds)):
        if isinstance(value, str):
            raise TypeError(f"{name} must be a collection of names, not a single string")
    _check_categories(categories)
    if kinds is not None:
        check_kinds(kinds)
    return tuple(
        d for d in DETECTORS if d.category in categories and (kinds is None or d.kind in kinds)
    )


def find(
    text: str,
    *,
    categories: Collection[str] = CATEGORIES,
    kinds: Collection[str] | None = None,
) -> list[Finding]:
    """Everything sensitive in ``text``, sorted by position and never overlapping.

    ``categories`` chooses among ``"secret"``, ``"pii"`` and ``"injection"``;
    ``kinds`` narrows further to named kinds (see :data:`KINDS`). When two
    findings overlap the longer one is kept (on a tie, the earlier, then the
    kind listed first in :data:`KINDS`).
    """
    folded = fold(text)
    found = [
        finding
        for detector in detectors_for(categories, kinds)
        if detector.applies(text, folded)
        for _, _, finding in detector.scan(text, 0, folded)
    ]
    return non_overlapping(found, _PRIORITY)
