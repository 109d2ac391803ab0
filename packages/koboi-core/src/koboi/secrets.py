"""What is a secret: the one definition, for names and for values.

Everything in koboi that must keep a secret out of sight asks this module: the
governance redaction (journal, audit trail, what a run shows), ``koboi show``
and every other line the CLI prints, a bundle's config export, the sandbox's
environment scrub, log lines.

*Names* (:func:`is_secret_name`): an environment variable, a config key, a tool
argument, an HTTP header whose name says it holds a credential: a whole word of
the name (split at ``_``, ``-``, ``.``, spaces and camelCase humps) is one of
:data:`SECRET_NAME_WORDS`, or ends with ``key``, ``token``, ``secret``,
``password``, ``passwd`` (``OPENAI_API_KEY``, ``apiKey``, ``githubToken``,
``DB_PASSWORD`` are secret names; ``KEYBOARD_LAYOUT``, ``max_tokens``,
``tokenizer`` are not), unless its last word says the name is *about* a secret
(``api_key_env``, ``token_url``, ``password_file``: a variable's name, an address,
a path).

*Values* (:func:`find_secrets`): credentials recognisable by their shape
(provider API keys, cloud and forge tokens, JWTs, ``Authorization`` values, PEM
private keys, passwords in URLs) and values assigned to secret-looking names
(``password=…``, ``"api_key": "…"``; only the value is the finding). Each
detector is one compiled regular expression plus, where a shape alone is too
weak, a check of the matched text (placeholders, "is this a word or a name in
code rather than a credential"). A detector whose *anchors* or *hints* do not
occur in the text is skipped, so ordinary prose costs a few substring searches.

Kinds of category ``suspect`` (:data:`SUSPECT_DETECTORS`: long random-looking
tokens) are secrets only for what a person is shown (the CLI masks them); the
journal keeps them, since base64 data and generated ids look the same.

Every detector is bounded in length (:data:`MAX_MATCH_CHARS`) and describes how
an unfinished match can look at the end of a text (:attr:`Detector.tail`), so a
streaming redactor knows what to hold back. Boundary rule shared by every
pattern: a match never starts right after ``]`` nor ends right before ``[``, and
no value runs into ``[REDACTED``, so redacting twice gives the same text as once.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_MATCH_CHARS",
    "SECRET_DETECTORS",
    "SECRET_NAME_WORDS",
    "SUSPECT_DETECTORS",
    "TOKEN_RUN_CHARS",
    "Detector",
    "Finding",
    "find_secrets",
    "fold",
    "is_secret_name",
    "looks_like_placeholder",
    "make_detector",
    "mask_secrets",
    "non_overlapping",
    "secret_values",
]

#: A finding's category: ``secret`` here; plugins add theirs (``pii``, ``injection``).
Category = str


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
    return len(value) >= 8 and any(not c.isalpha() for c in value)


def _url_password_ok(value: str) -> bool:
    # A short password ("pw") is still one; a placeholder word ("pass", "changeme"),
    # a template or an already masked value ("***") is not.
    if len(value.strip()) < 3:
        return not set(value) <= set("*x.-_")
    return not looks_like_placeholder(value)


def _basic_value_ok(value: str) -> bool:
    """A standalone "Basic xyz" counts only when xyz decodes to "user:password"."""
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return False
    return ":" in decoded and decoded.isprintable()


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


def make_detector(
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
    """A :class:`Detector` from a pattern's text and its options (``flags`` default to
    ASCII matching; without ``re.ASCII`` the detector is Unicode-aware)."""
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

SECRET_DETECTORS: tuple[Detector, ...] = (
    make_detector(
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
    make_detector(
        "jwt",
        "secret",
        r"(?<![A-Za-z0-9_\-\]])eyJ[A-Za-z0-9_\-]{5,1021}\.[A-Za-z0-9_\-]{5,8192}\.[A-Za-z0-9_\-]{0,1024}",
        anchors=["eyj"],
    ),
    make_detector(
        "anthropic_api_key",
        "secret",
        r"(?<![A-Za-z0-9_\-\]])sk-ant-[A-Za-z0-9_\-]{20,250}",
        accept=_has_digit_and_letter,
        anchors=["sk-ant-"],
    ),
    make_detector(
        "openai_api_key",
        "secret",
        # sk-…, sk-proj-…, sk-svcacct-…; the body of a real key mixes letters and
        # digits, which keeps "sk-learn-compatible-estimators" out.
        r"(?<![A-Za-z0-9_\-\]])sk-(?!ant-)[A-Za-z0-9_\-]{20,250}",
        accept=_has_digit_and_letter,
        anchors=["sk-"],
    ),
    make_detector(
        "aws_access_key_id",
        "secret",
        r"(?<![A-Za-z0-9\]])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9\[])",
        anchors=["akia", "asia"],
    ),
    make_detector(
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
    make_detector(
        "github_token",
        "secret",
        r"(?<![A-Za-z0-9_\]])(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,255})",
        anchors=["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
    ),
    make_detector(
        "gitlab_token",
        "secret",
        r"(?<![A-Za-z0-9_\-\]])glpat-[A-Za-z0-9_\-]{20,64}",
        anchors=["glpat-"],
    ),
    make_detector(
        "slack_token",
        "secret",
        r"(?<![A-Za-z0-9_\-\]])xox[abposr]-[A-Za-z0-9\-]{10,250}",
        accept=_has_digit,
        anchors=["xox"],
    ),
    make_detector(
        "stripe_key",
        "secret",
        r"(?<![A-Za-z0-9_\]])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,250}",
        anchors=["sk_live_", "sk_test_", "rk_live_", "rk_test_"],
    ),
    make_detector(
        "google_api_key",
        "secret",
        r"(?<![A-Za-z0-9_\-\]])AIza[A-Za-z0-9_\-]{35}(?![A-Za-z0-9_\-\[])",
        anchors=["aiza"],
    ),
    make_detector(
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
    make_detector(
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
    make_detector(
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
    make_detector(
        "url_credentials",
        "secret",
        # scheme://user:password@host: the password only.
        r"(?<![A-Za-z0-9+.\-\]])[A-Za-z][A-Za-z0-9+.\-]{1,30}://[^\s:/@\[\]]{0,128}:"
        r"(?P<value>[^\s/@\[\]]{1,256})@",
        groups=["value"],
        # Any password in a URL is one, however short ("pw"); only a template
        # ("${DB_PASSWORD}") or an already masked one ("***") is not.
        accept=_url_password_ok,
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
        make_detector(
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


# --------------------------------------------------------------------------- names

# Words that make an environment variable's value a secret (whole words of the
# name: OPENAI_API_KEY and DB_PASSWORD are, KEYBOARD_LAYOUT and PATH are not).
SECRET_NAME_WORDS: frozenset[str] = frozenset(
    [
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
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
        "AUTHORIZATION",
        "COOKIE",
        "COOKIES",
        "PRIVATE",
        "CREDS",
        "DSN",
    ]
)
# (No "TOKENS": "max_tokens" counts tokens, it holds none.)
#: Endings of one word that make it a secret name ("APIKEY", "GITHUBTOKEN", "DBPASSWORD").
_SECRET_ENDINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")
#: Words that end like a secret name but are not one.
_NOT_SECRET_WORDS = frozenset(["MONKEY", "TURKEY", "HOCKEY", "DONKEY", "JOCKEY", "WHISKEY"])
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_HUMPS = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def name_words(name: str) -> list[str]:
    """The words of a name, upper-cased: split at non-alphanumerics and camelCase humps."""
    return [w.upper() for part in _WORD_SPLIT.split(name) for w in _HUMPS.split(part) if w]


#: Last words that make a name *about* a secret, not one: where it is, what it is called.
_ABOUT_WORDS = frozenset(
    [
        "ENV",
        "VAR",
        "VARIABLE",
        "FILE",
        "PATH",
        "DIR",
        "NAME",
        "ID",
        "URL",
        "URI",
        "TYPE",
        "KIND",
        "HEADER",
        "SOCK",
        "SOCKET",
        "FIELD",
        "PREFIX",
        "FORMAT",
        "LENGTH",
        "COUNT",
        "TTL",
        "SECONDS",
        "EXPIRY",
    ]
)


def is_secret_name(name: str) -> bool:
    """True when ``name`` (an environment variable, a config key, an argument, a header)
    says it holds a secret; see the module docstring for the rule."""
    words = name_words(name)
    if len(words) > 1 and words[-1] in _ABOUT_WORDS:
        return False  # api_key_env, token_url, password_file: about a secret, not one
    for word in words:
        if word in SECRET_NAME_WORDS:
            return True
        if word not in _NOT_SECRET_WORDS and word.endswith(_SECRET_ENDINGS) and len(word) > 5:
            return True
    return False


_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
_BOOLEAN = frozenset(
    ["true", "false", "yes", "no", "on", "off", "none", "null", "enabled", "disabled"]
)
_PATH = re.compile(r"(?:/|~/|\./|\.\./|[A-Za-z]:[\\/])\S*")
_PLAIN_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^@\s]*")


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """The values of ``environ`` that are secrets, judged by the variable's name.

    A value counts when its name is a secret name (:func:`is_secret_name`) and the
    value is at least 8 characters and is not a placeholder, a boolean, a number,
    a file path or a URL without credentials (``SSH_AUTH_SOCK=/tmp/…`` names a
    socket, not a secret). Each value is listed once, in the order of ``environ``,
    without surrounding whitespace.
    """
    found: list[str] = []
    seen: set[str] = set()
    for name, value in environ.items():
        if not is_secret_name(name):
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


# --------------------------------------------------------------------------- suspects

_LONG_TOKEN = r"(?<![A-Za-z0-9_+/=\-\]])[A-Za-z0-9_+/=\-]{32,512}(?![A-Za-z0-9_+/=\-\[])"


def _looks_random(token: str) -> bool:
    # Mixed case and digits: hex digests and uuids (one case) are left alone.
    return (
        any(c.islower() for c in token)
        and any(c.isupper() for c in token)
        and any(c.isdigit() for c in token)
    )


SUSPECT_DETECTORS: tuple[Detector, ...] = (
    make_detector("random_token", "suspect", _LONG_TOKEN, accept=_looks_random),
)


# --------------------------------------------------------------------------- finding

_PRIORITY = {d.kind: n for n, d in enumerate((*SECRET_DETECTORS, *SUSPECT_DETECTORS))}


def non_overlapping(found: Sequence[Finding], priority: Mapping[str, int]) -> list[Finding]:
    """``found`` without overlaps, sorted by position: the longer finding is kept (on a
    tie the earlier, then the kind with the lower ``priority``)."""
    ordered = sorted(found, key=lambda f: (f.start - f.end, f.start, priority.get(f.kind, 0)))
    # Kept findings never overlap, so sorted by start they are sorted by end
    # too: a candidate overlaps one of them only if it overlaps a neighbour.
    starts: list[int] = []
    kept: list[Finding] = []
    for finding in ordered:
        index = bisect.bisect_left(starts, finding.start)
        if index < len(kept) and kept[index].start < finding.end:
            continue
        if index > 0 and kept[index - 1].end > finding.start:
            continue
        starts.insert(index, finding.start)
        kept.insert(index, finding)
    return kept


def find_secrets(text: str, *, suspects: bool = False) -> list[Finding]:
    """Every secret in ``text`` (with ``suspects``, random-looking tokens too), sorted by
    position and never overlapping."""
    folded = fold(text)
    detectors = (*SECRET_DETECTORS, *SUSPECT_DETECTORS) if suspects else SECRET_DETECTORS
    found = [
        finding
        for detector in detectors
        if detector.applies(text, folded)
        for _, _, finding in detector.scan(text, 0, folded)
    ]
    return non_overlapping(found, _PRIORITY)


def mask_secrets(
    text: str, *, marker: Callable[[str], str] = lambda kind: "***", suspects: bool = True
) -> str:
    """``text`` with every secret replaced by ``marker(kind)`` (default ``***``).

    What is shown to a person: ``suspects`` (on by default) masks random-looking
    tokens too.
    """
    if not text:
        return text
    findings = find_secrets(text, suspects=suspects)
    if not findings:
        return text
    parts: list[str] = []
    position = 0
    for finding in findings:
        parts.append(text[position : finding.start])
        parts.append(marker(finding.kind))
        position = finding.end
    parts.append(text[position:])
    return "".join(parts)
