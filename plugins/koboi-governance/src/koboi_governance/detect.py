"""Finding secrets, personal data and prompt-injection attempts in text.

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

import base64
import binascii
import bisect
import difflib
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

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


@dataclass(frozen=True)
class Finding:
    """Something sensitive found in a text: its kind and where it is.

    ``text[start:end]`` is the sensitive part. A finding deliberately carries no
    copy of it, so findings can be stored and shown without leaking anything.
    """

    kind: str
    category: Category
    start: int
    end: int


def fold(text: str) -> str:
    """``text`` lower-cased character for character (same length, same positions).

    ``str.lower`` keeps positions for every character but one: U+0130 (capital
    I with dot) becomes two characters, so it is replaced first. ASCII letters
    fold exactly as the detectors' ASCII case-insensitive patterns do.
    """
    if "\u0130" in text:
        text = text.replace("\u0130", "\x00")
    return text.lower()


@dataclass(frozen=True)
class Detector:
    """One way of recognising one kind of finding.

    ``pattern`` finds candidates; ``groups`` names the groups holding the
    sensitive part (the first one that took part in the match wins; none means
    the whole match); ``accept`` vets the sensitive part (checksums,
    placeholders).

    Speed: ``anchors`` are lower-case strings one of which every match starts
    with (or, with ``back``, is preceded by up to ``back_max`` characters of
    ``back``, as the local part precedes the ``@`` of an e-mail address); the
    pattern is then tried only there, found with :meth:`str.find` in the
    folded text. ``hints`` are lower-case strings of which every match contains
    one: without them in the folded text the detector is skipped.
    ``unicode_aware`` detectors match Unicode case and whitespace, so anchors
    and hints apply to them only on ASCII text; ``non_ascii_only`` ones cannot
    match ASCII text at all.

    Streams: ``tail`` is a pattern (without the final ``\\Z``) matching, at the
    end of a text, every beginning of a match that more text could still
    complete or change; ``tail_chars`` bounds its length and ``tail_hints`` work
    as ``hints``. ``None`` means a match never contains ASCII whitespace or
    brackets, so "the last word of the text" is already a sufficient tail.
    Injection detectors have no tail: they are reported, never redacted.
    """

    kind: str
    category: Category
    pattern: re.Pattern[str]
    groups: tuple[str, ...] = ()
    accept: Callable[[str], bool] | None = None
    anchors: tuple[str, ...] = ()
    back: str = ""
    back_max: int = 0
    hints: tuple[str, ...] = ()
    unicode_aware: bool = False
    non_ascii_only: bool = False
    tail: str | None = None
    tail_chars: int = 0
    tail_hints: tuple[str, ...] = ()

    def applies(self, text: str, folded: str) -> bool:
        """False when ``text`` (``folded``: its :func:`fold`) cannot hold a match."""
        if self.non_ascii_only:
            return not text.isascii()
        if self.unicode_aware and not text.isascii():
            return True
        hints = self.hints or self.anchors
        return not hints or any(hint in folded for hint in hints)

    def scan(
        self, text: str, pos: int = 0, folded: str | None = None
    ) -> Iterator[tuple[int, int, Finding]]:
        """Every finding from ``pos`` on, with the extent of the whole match it came from.

        The same as searching from ``pos`` again and again: after an accepted
        match the search resumes at its end; after a candidate the check
        refuses, one character after its start, so a refused candidate never
        hides a real match that starts inside it. (Otherwise masking a
        neighbouring secret could uncover a match the first pass skipped, and
        redacting twice would differ from redacting once.)
        """
        if self.anchors and not (self.unicode_aware and not text.isascii()):
            next_match = self._anchored(text, pos, fold(text) if folded is None else folded)
        else:
            search = self.pattern.search

            def next_match(position: int) -> re.Match[str] | None:
                return search(text, position)

        position = pos
        while (match := next_match(position)) is not None:
            start, end = match.span()
            for name in self.groups:
                if match.group(name) is not None:
                    start, end = match.span(name)
                    break
            if self.accept is None or self.accept(text[start:end]):
                yield match.start(), match.end(), Finding(self.kind, self.category, start, end)
                position = max(match.end(), match.start() + 1)
            else:
                position = match.start() + 1

    def _anchored(self, text: str, pos: int, folded: str) -> Callable[[int], re.Match[str] | None]:
        """A "search from here" that tries the pattern only where an anchor allows a match."""
        found: set[int] = set()
        for anchor in self.anchors:
            index = folded.find(anchor, pos)
            while index >= 0:
                found.add(index)
                index = folded.find(anchor, index + 1)
        if self.back:
            starts: set[int] = set()
            for index in found:
                start, limit = index, max(0, index - self.back_max)
                while start > limit and text[start - 1] in self.back:
                    start -= 1
                starts.add(start)
            found = starts
        candidates = sorted(found)
        match_at = self.pattern.match
        cursor = 0

        def next_match(position: int) -> re.Match[str] | None:
            nonlocal cursor
            while cursor < len(candidates):
                start = candidates[cursor]
                cursor += 1
                if start >= position and (match := match_at(text, start)) is not None:
                    return match
            return None

        return next_match


# --------------------------------------------------------------------------- checks


def _has_digit_and_letter(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _has_digit(value: str) -> bool:
    return any(c.isdigit() for c in value)


# Whole values that are placeholders or flags, not secrets ("password: null",
# "token=changeme", "secret: ***").
_PLACEHOLDER_VALUE = re.compile(
    r"(?:none|null|nil|undefined|true|false|yes|no|on|off|empty|redacted|hidden|masked"
    r"|secret|password|passwd|token|changeme|change[-_]?me|example|sample|dummy|placeholder"
    r"|test|todo|fixme|required|optional|pass|pwd|user|username|x{3,}|\*+|\.+|-+|_+|#+|0+|\d{1,5}"
    # elided: "sk-...", "ghp_…"
    r"|.*(?:\.\.\.|\u2026)"
    # type names, as in "password: str" or "api_key: SecretStr | None"
    r"|str|string|int|bool|boolean|bytes|float|number|dict|list|any|object|secretstr|secretbytes)",
    re.IGNORECASE,
)
# Templates and references: "${DB_PASSWORD}", "{{ vault_pass }}", "<your token>",
# "%(password)s", "$SECRET".
_TEMPLATE_VALUE = re.compile(
    r"\$\{.*\}|\{\{.*\}\}|<.*>|%\(.*\)s|\$[A-Za-z_][A-Za-z0-9_]*|\[.*\]", re.DOTALL
)
# Words that give an example value away ("your-api-key-here"), as whole parts.
_GIVEAWAY_PARTS = frozenset(
    [
        "your",
        "insert",
        "enter",
        "replace",
        "here",
        "placeholder",
        "changeme",
        "dummy",
        "example",
        "fake",
        "sample",
    ]
)


def looks_like_placeholder(value: str) -> bool:
    """True for values copied from examples or templates rather than real secrets."""
    value = value.strip()
    if len(value) < 3 or _PLACEHOLDER_VALUE.fullmatch(value) or _TEMPLATE_VALUE.fullmatch(value):
        return True
    parts = {p.lower() for p in re.split(r"[-_\s.]+", value) if p}
    return bool(parts & _GIVEAWAY_PARTS)


# Values that read as a word or a name in code rather than a credential:
# "token = floor_token", "api_key=KEY", "token: EventLoopToken", ":param
# token: the claim", "password: settings.DB_PASSWORD", "UPGRADE_TOKEN = "upgrades"".
_WORD_OR_NAME = re.compile(r"[a-z_]+|[A-Z_]+|_*(?:[A-Z][a-z]+)+")
_CODE_NAME = re.compile(
    r"[A-Z_]+|_*(?:[A-Z][a-z]+)+|_*[a-z]+(?:_[a-z]+)+"
    r"|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+"
)
# Format strings: "{%s}", "%(name)s", "{}".
_FORMAT_STRING = re.compile(r".*(?:%[sd]|\{\}).*")


def _password_quoted_ok(value: str) -> bool:
    # A quoted password is whatever is between the quotes ("tiger" included).
    return not looks_like_placeholder(value)


def _credential_like(value: str) -> bool:
    # Tokens, keys and secrets are random, and so is an unquoted password in
    # practice: a word, a name in code or a format string is something else
    # ("password = auth", ":param password: new password", "UPGRADE_TOKEN = "upgrades"").
    value = value.strip()
    return not (
        looks_like_placeholder(value)
        or _WORD_OR_NAME.fullmatch(value)
        or _CODE_NAME.fullmatch(value)
        or _FORMAT_STRING.fullmatch(value)
    )


_AUTH_SCHEMES = frozenset(
    ["bearer", "basic", "token", "digest", "negotiate", "apikey", "api-key", "key"]
)


def _authorization_value_ok(value: str) -> bool:
    return (
        len(value) >= 6 and value.lower() not in _AUTH_SCHEMES and not looks_like_placeholder(value)
    )


def _bearer_value_ok(value: str) -> bool:
    # "Bearer responsibilities" is prose; a token has digits or punctuation.
    return len(value) >= 16 and any(not c.isalpha() for c in value)


def _basic_value_ok(value: str) -> bool:
    """A standalone "Basic xyz" counts only when xyz decodes to "user:password"."""
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return False
    return ":" in decoded and decoded.isprintable()


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


# --------------------------------------------------------------------------- patterns

_ASCII = re.ASCII
# Separators of "name = value" in code, configs, JSON and env files
# ("==", "!=" and "::" are comparisons and paths, not assignments).
_SEP = r"(?::=|=>|:(?!:)|=(?!=))"
# Names whose value is a secret. "token" must end the name: "max_tokens" and
# "token_count" hold numbers, "tokenizer" a model name.
_PASSWORD_WORDS = r"(?:passw(?:or)?d|passphrase)"
_TOKEN_WORDS = (
    r"(?:secret|token|cookie|apikey"
    r"|(?:api|access|secret|private|signing|encryption|master|session|client)[_\-]?key)"
)
_SECRET_WORDS = f"(?:{_PASSWORD_WORDS}|{_TOKEN_WORDS})"
# A value never runs into a redaction marker, so redacted text stays as it is.
_NOT_MARKER = r"(?!\[REDACTED)"
_PEM_WORDS = r"(?:[A-Z0-9]{1,20} ){0,4}"
_PEM_BEGIN = rf"-----BEGIN {_PEM_WORDS}PRIVATE KEY(?: BLOCK)?-----"
_PEM_END = rf"-----END {_PEM_WORDS}PRIVATE KEY(?: BLOCK)?-----"
_PEM_MATERIAL = r"[A-Za-z0-9+/=\s:,.\-]"
_PEM_BODY_CHARS = 16_384
# The digits-and-separators shapes of phone, card and SSN numbers, unfinished.
_NUMBER_TAIL = r"[+(0-9][0-9 ().\-]{0,150}"

MAX_MATCH_CHARS = 16_700
"""No secret or PII match is longer than this (a PEM block with 16 KiB of key
material is the longest); no unfinished-match tail either."""

TOKEN_RUN_CHARS = 10_400
"""No secret or PII match without whitespace is longer than this (a JWT)."""


def _detector(
    kind: str,
    category: Category,
    pattern: str,
    *,
    flags: int = _ASCII,
    groups: Iterable[str] = (),
    accept: Callable[[str], bool] | None = None,
    anchors: Iterable[str] = (),
    back: str = "",
    back_max: int = 0,
    hints: Iterable[str] = (),
    non_ascii_only: bool = False,
    tail: str | None = None,
    tail_chars: int = 0,
    tail_hints: Iterable[str] = (),
) -> Detector:
    return Detector(
        kind=kind,
        category=category,
        pattern=re.compile(pattern, flags),
        groups=tuple(groups),
        accept=accept,
        anchors=tuple(anchors),
        back=back,
        back_max=back_max,
        hints=tuple(hints),
        unicode_aware=not flags & re.ASCII,
        non_ascii_only=non_ascii_only,
        tail=tail,
        tail_chars=tail_chars,
        tail_hints=tuple(tail_hints),
    )


_LETTERS_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_TOKEN_WORD_ANCHORS = [
    "secret",
    "token",
    "cookie",
    "api",
    "access",
    "private",
    "signing",
    "encryption",
    "master",
    "session",
    "client",
]

_ASSIGNMENT_TAIL = rf"(?i:{_SECRET_WORDS})[\"']?\s{{0,3}}(?:{_SEP}\s{{0,3}}(?:[\"'][^\n]{{0,260}}|[^\s]{{0,260}})?)?"
_ASSIGNMENT_HINTS = ("pass", "secret", "token", "key", "cookie")
_QUOTED_VALUE = rf"(?P<q>[\"'])(?P<value>(?:(?!(?P=q)){_NOT_MARKER}[^\n]){{1,256}}+)(?P=q)"
# Unquoted values are printable ASCII without quotes, separators and brackets
# (so "«password=x»" and "password=x, user=y" end where they should).
_UNQUOTED_VALUE = r"(?P<value>[!#$%*+\-./0-9:=?@A-Z\\^_a-z|~]{1,256}+)(?![\[(])"

_SECRET_DETECTORS = (
    _detector(
        "private_key",
        "secret",
        # The whole block, END line included; a block cut short (no END line) is
        # masked through its last line of key material.
        rf"{_PEM_BEGIN}(?:{_PEM_MATERIAL}{{0,{_PEM_BODY_CHARS}}}?{_PEM_END}"
        rf"|{_PEM_MATERIAL}{{0,{_PEM_BODY_CHARS}}})",
        anchors=["-----begin"],
        tail=rf"-----BEGIN(?:[A-Z0-9 \-]{{0,130}}|[A-Z0-9 ]{{0,110}}-----"
        rf"(?:(?!{_PEM_END}){_PEM_MATERIAL}){{0,{_PEM_BODY_CHARS + 100}}})",
        tail_chars=MAX_MATCH_CHARS,
        tail_hints=["-----begin"],
    ),
    _detector(
        "jwt",
        "secret",
        r"(?<![A-Za-z0-9_\-\]])eyJ[A-Za-z0-9_\-]{5,1021}\.[A-Za-z0-9_\-]{5,8192}\.[A-Za-z0-9_\-]{0,1024}",
        anchors=["eyj"],
    ),
    _detector(
        "anthropic_api_key",
        "secret",
        r"(?<![A-Za-z0-9_\-\]])sk-ant-[A-Za-z0-9_\-]{20,250}",
        accept=_has_digit_and_letter,
        anchors=["sk-ant-"],
    ),
    _detector(
        "openai_api_key",
        "secret",
        # sk-…, sk-proj-…, sk-svcacct-…; the body of a real key mixes letters and
        # digits, which keeps "sk-learn-compatible-estimators" out.
        r"(?<![A-Za-z0-9_\-\]])sk-(?!ant-)[A-Za-z0-9_\-]{20,250}",
        accept=_has_digit_and_letter,
        anchors=["sk-"],
    ),
    _detector(
        "aws_access_key_id",
        "secret",
        r"(?<![A-Za-z0-9\]])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9\[])",
        anchors=["akia", "asia"],
    ),
    _detector(
        "aws_secret_access_key",
        "secret",
        rf"(?i:aws_?secret_?access_?key)[\"']?\s{{0,3}}{_SEP}\s{{0,3}}[\"']?"
        r"(?P<value>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=\[])",
        groups=["value"],
        anchors=["aws"],
        tail=rf"(?i:aws_?secret_?access_?key)[\"']?\s{{0,3}}(?:{_SEP}\s{{0,3}}[\"']?[A-Za-z0-9/+=]{{0,41}})?",
        tail_chars=110,
        tail_hints=["secret"],
    ),
    _detector(
        "github_token",
        "secret",
        r"(?<![A-Za-z0-9_\]])(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,255})",
        anchors=["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
    ),
    _detector(
        "gitlab_token",
        "secret",
        r"(?<![A-Za-z0-9_\-\]])glpat-[A-Za-z0-9_\-]{20,64}",
        anchors=["glpat-"],
    ),
    _detector(
        "slack_token",
        "secret",
        r"(?<![A-Za-z0-9_\-\]])xox[abposr]-[A-Za-z0-9\-]{10,250}",
        accept=_has_digit,
        anchors=["xox"],
    ),
    _detector(
        "stripe_key",
        "secret",
        r"(?<![A-Za-z0-9_\]])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,250}",
        anchors=["sk_live_", "sk_test_", "rk_live_", "rk_test_"],
    ),
    _detector(
        "google_api_key",
        "secret",
        r"(?<![A-Za-z0-9_\-\]])AIza[A-Za-z0-9_\-]{35}(?![A-Za-z0-9_\-\[])",
        anchors=["aiza"],
    ),
    _detector(
        "authorization",
        "secret",
        # The credential of an Authorization header, whatever its scheme.
        r"(?<![A-Za-z0-9_\]])(?i:(?:proxy-)?authorization)[\"']?\s{0,3}[:=]\s{0,3}[\"']?"
        r"(?:(?i:bearer|basic|token|digest|negotiate|apikey|api-key|key)\s{1,3})?"
        r"(?P<value>[A-Za-z0-9._~+/=\-]{1,2048}+)",
        groups=["value"],
        accept=_authorization_value_ok,
        anchors=["authorization", "proxy-authorization"],
        tail=r"(?i:(?:proxy-)?authorization)[\"']?\s{0,3}(?:[:=]\s{0,3}[\"']?"
        r"(?:[A-Za-z\-]{1,12}\s{1,3})?[A-Za-z0-9._~+/=\-]{0,2050})?",
        tail_chars=2_120,
        tail_hints=["authorization"],
    ),
    _detector(
        "authorization",
        "secret",
        # "Bearer <token>" outside a header (curl lines, logged requests).
        r"(?<![A-Za-z0-9_\-\]])(?i:bearer)\s{1,3}(?P<value>[A-Za-z0-9._~+/\-]{1,2048}+={0,2})",
        groups=["value"],
        accept=_bearer_value_ok,
        anchors=["bearer"],
        tail=r"(?i:bearer)(?:\s{1,3}[A-Za-z0-9._~+/\-]{0,2050}={0,3})?",
        tail_chars=2_100,
        tail_hints=["bearer"],
    ),
    _detector(
        "authorization",
        "secret",
        # "Basic <base64 of user:password>" outside a header.
        r"(?<![A-Za-z0-9_\-\]])(?i:basic)\s{1,3}(?P<value>[A-Za-z0-9+/]{8,2048}+={0,2})"
        r"(?![A-Za-z0-9+/=\[])",
        groups=["value"],
        accept=_basic_value_ok,
        anchors=["basic"],
        tail=r"(?i:basic)(?:\s{1,3}[A-Za-z0-9+/]{0,2050}={0,3})?",
        tail_chars=2_100,
        tail_hints=["basic"],
    ),
    _detector(
        "url_credentials",
        "secret",
        # scheme://user:password@host: the password only.
        r"(?<![A-Za-z0-9+.\-\]])[A-Za-z][A-Za-z0-9+.\-]{1,30}://[^\s:/@\[\]]{0,128}:"
        r"(?P<value>[^\s/@\[\]]{1,256})@",
        groups=["value"],
        accept=lambda value: not looks_like_placeholder(value),
        anchors=["://"],
        back=_LETTERS_DIGITS + "+.-",
        back_max=31,
    ),
    # name = value, name: "value", "name": 'value'… where the name ends in a
    # secret word; only the value is the finding. Quoted values may hold spaces
    # and need their closing quote on the same line within 256 characters;
    # unquoted ones stop at whitespace, quotes, separators and brackets, and
    # one followed by "(" or "[" is code (a call, an index).
    *(
        _detector(
            "secret_assignment",
            "secret",
            rf"(?i:{words})[\"']?\s{{0,3}}{_SEP}\s{{0,3}}{value}",
            groups=["value"],
            accept=accept,
            anchors=anchors,
            tail=_ASSIGNMENT_TAIL,
            tail_chars=340,
            tail_hints=_ASSIGNMENT_HINTS,
        )
        for words, anchors, value, accept in (
            (_PASSWORD_WORDS, ["pass"], _QUOTED_VALUE, _password_quoted_ok),
            (_PASSWORD_WORDS, ["pass"], _UNQUOTED_VALUE, _credential_like),
            (_TOKEN_WORDS, _TOKEN_WORD_ANCHORS, _QUOTED_VALUE, _credential_like),
            (_TOKEN_WORDS, _TOKEN_WORD_ANCHORS, _UNQUOTED_VALUE, _credential_like),
        )
    ),
)

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
    found.sort(key=lambda f: (f.start - f.end, f.start, _PRIORITY[f.kind]))
    # Kept findings never overlap, so sorted by start they are sorted by end
    # too: a candidate overlaps one of them only if it overlaps a neighbour.
    starts: list[int] = []
    kept: list[Finding] = []
    for finding in found:
        index = bisect.bisect_left(starts, finding.start)
        if index < len(kept) and kept[index].start < finding.end:
            continue
        if index > 0 and kept[index - 1].end > finding.start:
            continue
        starts.insert(index, finding.start)
        kept.insert(index, finding)
    return kept


# --------------------------------------------------------------------------- environment

# Words that make an environment variable's value a secret (whole words of the
# name: OPENAI_API_KEY and DB_PASSWORD are, KEYBOARD_LAYOUT and PATH are not).
_SECRET_NAME_WORDS = frozenset(
    [
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASS",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "PRIVATE",
    ]
)
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
_BOOLEAN = frozenset(
    ["true", "false", "yes", "no", "on", "off", "none", "null", "enabled", "disabled"]
)
_PATH = re.compile(r"(?:/|~/|\./|\.\./|[A-Za-z]:[\\/])\S*")
_PLAIN_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^@\s]*")


def secrets_from_env(environ: Mapping[str, str]) -> list[str]:
    """The values of ``environ`` that are secrets, judged by the variable's name.

    A value counts when a whole word of its name says secret (``KEY``,
    ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PASSWD``, ``PASS``, ``CREDENTIAL``,
    ``AUTH``, ``PRIVATE``…) and the value is at least 8 characters and is not a
    placeholder, a boolean, a number, a file path or a URL without credentials
    (``SSH_AUTH_SOCK=/tmp/…`` names a socket, not a secret). Each value is
    listed once, in the order of ``environ``, without surrounding whitespace.
    """
    found: list[str] = []
    seen: set[str] = set()
    for name, value in environ.items():
        words = {w for w in re.split(r"[^A-Za-z0-9]+", name.upper()) if w}
        if not words & _SECRET_NAME_WORDS:
            continue
        stripped = value.strip()
        if (
            len(stripped) < 8
            or stripped.lower() in _BOOLEAN
            or _NUMBER.fullmatch(stripped)
            or _PATH.fullmatch(stripped)
            or _PLAIN_URL.fullmatch(stripped)
            or looks_like_placeholder(stripped)
        ):
            continue
        if stripped not in seen:
            seen.add(stripped)
            found.append(stripped)
    return found
