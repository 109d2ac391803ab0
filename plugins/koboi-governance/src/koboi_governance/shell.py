"""Split a POSIX shell command line into the simple commands it would run.

The policy judges a shell tool call command by command, so that ``ls && rm -rf x``
is judged as ``ls`` *and* ``rm -rf x``. :func:`segments` returns every simple
command the line can start, in the order the shell would reach them:

- commands joined by ``&&``, ``||``, ``;``, ``|``, ``|&``, ``&`` and newlines;
- commands inside ``$( … )``, backquotes, ``<( … )``, ``>( … )``, ``( … )``
  subshells and ``{ …; }`` groups, wherever they appear (a substitution inside an
  argument, an assignment or a redirection target yields its own segments, listed
  before the command that uses it, since it runs first);
- the programs that programs which run other programs start: :data:`RUNNERS`
  names every one (``env``, ``sudo``, ``timeout``, ``flock``, ``taskset``,
  ``setarch`` and its aliases, ``prlimit``, ``chrt``, ``strace``, ``xargs``,
  ``find -exec``, ``ssh HOST COMMAND``, ``sh -c STRING``…, docs/governance.md lists
  them all). Their options are read, values included (``timeout -s KILL 5 rm``),
  long ones abbreviated as GNU getopt allows; a script they are given is split in
  turn. The runner stays a segment of its own: ``sudo rm x`` yields ``sudo rm x``
  and ``rm x``.

A segment's ``argv`` is what the program receives, after quote removal
(``'…'``, ``"…"``, ``$'…'``, backslashes). Expansions whose value is only known when
the command runs (``$HOME``, ``$(date)``, ``$((1+2))``) are kept as written.
Leading ``NAME=value`` assignments go to ``assignments``, redirections to
``redirects`` (``> out.txt``, ``2>&1``). ``scan_end`` tells the policy which words
could still name a program nobody unwrapped (all of them, for a program that is
not a runner).

The splitter is conservative: whatever it cannot judge soundly raises
:class:`TooComplex`, and the policy denies the call. That covers code that the
shell builds at run time (``eval``, ``source``/``.``, ``alias``, ``trap``, bash's
``let``/``declare``/``printf -v``/``test -v`` and arithmetic on names, which can
run commands hidden in array subscripts), a variable, substitution or pattern
where a program name goes, a script that is not literal text, control structures
and function definitions, heredocs, unterminated quotes, a shell reading commands
from its input (``curl … | sh``, ``sudo -s``), shells that are not POSIX ones,
more than ``max_segments`` segments, nesting deeper than ``max_depth`` and NUL
bytes — wherever they stand, behind any runner too. What only a runner makes
uncertain — an option it does not know, a word known only at run time among its
options, words xargs appends to it, code in its own language (``gdb -ex``,
``tmux``), a shell it starts without a command (``unshare``, ``newgrp``) — marks
its segment ``opaque`` instead: the policy refuses it when a deny or ask rule
could apply, and never allows it.

What this does not see: programs that run code given as data (``python -c``,
``awk``, ``git -c alias.x=!…``, ``make``, a script file) are segments like any
other; allow them only where you would allow anything they could do.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from koboi.errors import KoboiError

__all__ = ["RUNNERS", "Segment", "TooComplex", "segments"]


@dataclass(frozen=True, slots=True)
class Segment:
    """One simple command the shell would run.

    ``argv`` is the program and its arguments after quote removal; ``redirects``
    the redirections written on it (``> out.txt``, ``2>&1``); ``assignments`` the
    ``NAME=value`` words that set its environment (``LD_PRELOAD=x.so ls``), or,
    for a command of assignments alone, the shell variables it sets.
    """

    argv: tuple[str, ...]
    redirects: tuple[str, ...] = ()
    assignments: tuple[str, ...] = ()
    #: Why the splitter cannot tell what this command runs ("" when it can): a runner
    #: option it does not know, a runner that runs code in its own language. The policy
    #: refuses such a command when a deny or ask rule could apply, and never allows it.
    opaque: str = ""
    #: Where the words that could name another program end: ``argv[1:scan_end]``. None:
    #: every word (a program the splitter does not know may run any of its arguments).
    #: For a runner it unwrapped, where the command it starts begins (that command is a
    #: segment of its own); 1 for a builtin that only prints or tests (``echo``, ``[``).
    scan_end: int | None = None

    @property
    def text(self) -> str:
        """``argv`` joined by single spaces: what command patterns match against."""
        return " ".join(self.argv)


class TooComplex(KoboiError, ValueError):
    """The command line cannot be judged soundly; the message says why."""


#: Characters that end an unquoted word.
_BLANK_RUN = re.compile(r"(?:[ \t]|\\\n)*")
_WORD_END = frozenset(" \t\n;&|()")
#: A run of characters that are literal in an unquoted word.
_PLAIN_RUN = re.compile(r"[^ \t\n;&|<>()'\"\\$`*?\[{]+")
#: A run of characters that are literal between double quotes.
_DQUOTED_RUN = re.compile(r'[^"\\$`]+')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARAMETER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[-@*#?$!]")
_DIGITS = re.compile(r"[0-9]+")
#: A file descriptor number written right before a redirection: the 2 of 2>&1.
_IO_NUMBER = re.compile(r"[0-9]+(?=[<>](?!\())")
_PARAMETER_START = frozenset(string.ascii_letters + string.digits + "_-@*#?$!")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
#: Characters allowed inside ``$(( … ))``: digits and operators. A name is refused:
#: bash evaluates a variable's value as an expression, and ``a[$(cmd)]`` in that
#: value runs ``cmd``.
_ARITHMETIC_CHARS = frozenset("0123456789 \t\n+-*/%<>=!&|^~?:,")
_REDIRECT_OPS = ("&>>", "&>", ">>", ">|", ">&", "<&", "<>", ">", "<")
_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}

#: Reserved words that open or close control structures: nothing in them is judged.
_KEYWORDS = frozenset(
    [
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "do",
        "done",
        "case",
        "esac",
        "while",
        "until",
        "for",
        "select",
        "function",
        "coproc",
        "[[",
        "]]",
        "repeat",
        "foreach",
    ]
)

#: Builtins that run text as code, change what later names mean, or (in bash)
#: evaluate array subscripts, which can hold a command substitution.
_REFUSED = {
    "eval": "uses eval (it runs text as shell code)",
    "source": "uses source (it runs a file as shell code)",
    ".": "uses '.' (it runs a file as shell code)",
    "alias": "defines an alias (it changes what later command names run)",
    "trap": "sets a trap (it runs text as shell code later)",
    "let": "uses let (bash arithmetic can run commands hidden in array subscripts)",
    "declare": "uses declare (bash evaluates array subscripts, which can run commands)",
    "typeset": "uses typeset (bash evaluates array subscripts, which can run commands)",
    "local": "uses local (bash evaluates array subscripts, which can run commands)",
    "readonly": "uses readonly (bash evaluates array subscripts, which can run commands)",
    "mapfile": "uses mapfile (it can run a callback given as text)",
    "readarray": "uses readarray (it can run a callback given as text)",
    "enable": "uses enable (it can load builtins from a shared library)",
    "fc": "uses fc (it re-runs history as shell code)",
    "compgen": "uses compgen (it can run a command given as text)",
    "complete": "uses complete (it can run a command given as text)",
    "bind": "uses bind (it can run a command given as text)",
    "hash": "uses hash (it can remap a command name to another program)",
}

_POSIX_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "posh", "rbash"})
_OTHER_SHELLS = frozenset({"fish", "csh", "tcsh", "pwsh", "nu", "xonsh", "elvish", "rc"})


@dataclass(slots=True)
class _Word:
    """One word of a simple command, with what the splitter learnt reading it."""

    value: str
    raw: str
    #: Holds an expansion ($x, $(…), `…`, <(…), $((…))): its value is known only at run time.
    expanded: bool = False
    #: May become several words or none: an unquoted expansion, a glob or a brace list.
    splittable: bool = False
    quoted: bool = False
    #: The word's text outside expansions: data, unless something evaluates it later.
    literal: str = ""


@dataclass(slots=True)
class _WordBuilder:
    value: list[str] = field(default_factory=list)
    literal: list[str] = field(default_factory=list)
    expanded: bool = False
    splittable: bool = False
    quoted: bool = False
    brace: bool = False
    bracket: bool = False


@dataclass(slots=True)
class _Output:
    segments: list[Segment]
    max_segments: int
    max_depth: int

    def add(self, segment: Segment) -> None:
        if len(self.segments) >= self.max_segments:
            raise TooComplex(f"runs more than {self.max_segments} commands")
        self.segments.append(segment)


@dataclass(frozen=True, slots=True)
class _Inner:
    """A command a runner starts: its words and the environment it sets."""

    words: Sequence[_Word]
    assignments: tuple[str, ...] = ()
    #: More words are appended when it runs (xargs): they could be what a runner runs.
    open_ended: bool = False


@dataclass(frozen=True, slots=True)
class _Inert:
    """What a runner answers when it runs nothing and only reads its words as data."""


_RUNS_NOTHING = _Inert()

#: What a runner starts: another command, a script for a shell to parse, or nothing at
#: all (``command -v rm`` only says what ``rm`` is).
_Started = _Inner | str | _Inert


class _CannotSee(Exception):
    """A runner's arguments cannot be read for sure: its segment is marked opaque."""


def segments(command: str, *, max_segments: int = 256, max_depth: int = 8) -> list[Segment]:
    """Every simple command ``command`` would run, in order (see the module docstring).

    Raises :class:`TooComplex` when the line cannot be judged soundly; never a
    silent pass. An empty line or a comment yields no segment.
    """
    if "\0" in command:
        raise TooComplex("contains a NUL byte")
    out = _Output([], max_segments, max_depth)
    _Parser(command, out).parse_list(0, None)
    return out.segments


class _Parser:
    """A recursive-descent reader of one shell text (a line, a backquoted or -c script)."""

    def __init__(self, source: str, out: _Output) -> None:
        self.s = source
        self.n = len(source)
        self.i = 0
        self.out = out

    # -- helpers ---------------------------------------------------------------

    def _nest(self, depth: int) -> int:
        deeper = depth + 1
        if deeper > self.out.max_depth:
            raise TooComplex(f"nests commands more than {self.out.max_depth} levels deep")
        return deeper

    def _peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.s[j] if j < self.n else ""

    def _skip_blanks(self) -> None:
        if self.i >= self.n or self.s[self.i] not in " \t\\":
            return
        match = _BLANK_RUN.match(self.s, self.i)
        assert match is not None  # the pattern matches the empty string
        self.i = match.end()

    def _skip_comment(self) -> None:
        end = self.s.find("\n", self.i)
        self.i = self.n if end < 0 else end

    def _skip_linebreaks(self) -> None:
        while True:
            self._skip_blanks()
            c = self._peek()
            if c == "\n":
                self.i += 1
            elif c == "#":
                self._skip_comment()
            else:
                return

    # -- grammar ---------------------------------------------------------------

    def parse_list(self, depth: int, closer: str | None) -> None:
        """Commands separated by ``;``, ``&`` or newlines, up to ``closer`` or the end."""
        while True:
            self._skip_linebreaks()
            if self.i >= self.n:
                if closer is not None:
                    opened = "(" if closer == ")" else "{"
                    raise TooComplex(f"has an unterminated '{opened}'")
                return
            c = self.s[self.i]
            if c == ")":
                if closer != ")":
                    raise TooComplex("has an unmatched ')'")
                self.i += 1
                return
            if c in ";&|":
                raise TooComplex(f"has nothing before '{c}'")
            if self._and_or(depth, closer):
                return
            self._skip_blanks()
            c = self._peek()
            if c == ";":
                if self._peek(1) in (";", "&"):
                    raise TooComplex("uses case syntax (';;' or ';&')")
                self.i += 1
            elif c in ("&", "\n"):
                self.i += 1
            elif c in ("", ")", "#"):
                continue
            else:
                raise TooComplex(f"has an unexpected {c!r}")

    def _and_or(self, depth: int, closer: str | None) -> bool:
        """A pipeline chain; true when it was the ``}`` that closes the current group."""
        if self._command(depth, closer):
            return True
        while True:
            self._skip_blanks()
            s, i = self.s, self.i
            if s.startswith(("&&", "||", "|&"), i):
                op = s[i : i + 2]
            elif s.startswith("|", i):
                op = "|"
            else:
                return False
            self.i += len(op)
            self._skip_linebreaks()
            if self.i >= self.n or self.s[self.i] in ";&|)":
                raise TooComplex(f"has nothing after '{op}'")
            if self._command(depth, closer):
                raise TooComplex(f"has nothing after '{op}'")

    def _command(self, depth: int, closer: str | None) -> bool:
        self._skip_blanks()
        if self.s.startswith("((", self.i):
            raise TooComplex("uses an arithmetic command '(( … ))'")
        if self._peek() == "(":
            inner = self._nest(depth)
            first = len(self.out.segments)
            self.i += 1
            self.parse_list(inner, ")")
            self._trailing_redirects(depth, first, ")")
            return False
        return self._simple(depth, closer)

    def _simple(self, depth: int, closer: str | None) -> bool:
        s, n = self.s, self.n
        words: list[_Word] = []
        assignments: list[str] = []
        redirects: list[str] = []
        while True:
            self._skip_blanks()
            if self.i >= n:
                break
            c = s[self.i]
            nxt = self._peek(1)
            if c in "\n;|)" or (c == "&" and nxt != ">"):
                break
            if c == "(":
                if words or assignments:
                    raise TooComplex(
                        "has a '(' after a word (function definitions, array assignments "
                        "and glob qualifiers are not judged)"
                    )
                raise TooComplex("has an unexpected '('")
            if c == "#":
                self._skip_comment()
                break
            redirect = self._redirection(depth)
            if redirect is not None:
                redirects.append(redirect)
                continue
            word = self._word(depth)
            if not words:
                if _ASSIGNMENT.match(word.raw):
                    assignments.append(_assignment(word))
                    continue
                keyword = word.raw if word.raw == word.value else ""
                if keyword == "!":
                    continue
                if keyword == "{":
                    if assignments or redirects:
                        raise TooComplex("has an unexpected '{'")
                    inner = self._nest(depth)
                    first = len(self.out.segments)
                    self.parse_list(inner, "}")
                    self._trailing_redirects(depth, first, "}")
                    return False
                if keyword == "}":
                    if closer != "}" or assignments or redirects:
                        raise TooComplex("has an unmatched '}'")
                    return True
                if keyword in _KEYWORDS:
                    raise TooComplex(
                        f"uses the shell keyword '{keyword}' (control structures and "
                        "functions are not judged)"
                    )
            words.append(word)
        if not (words or assignments or redirects):
            raise TooComplex("has an empty command")
        self._emit(words, tuple(assignments), tuple(redirects), depth)
        return False

    def _trailing_redirects(self, depth: int, first: int, closed: str) -> None:
        """Redirections after ``)`` or ``}``: they apply to every command inside."""
        redirects: list[str] = []
        while True:
            self._skip_blanks()
            c, nxt = self._peek(), self._peek(1)
            if c == "" or c in "\n;|)" or (c == "&" and nxt != ">"):
                break
            if c == "#":
                self._skip_comment()
                break
            redirect = self._redirection(depth)
            if redirect is None:
                raise TooComplex(f"has a word after '{closed}'")
            redirects.append(redirect)
        if redirects:
            added = tuple(redirects)
            found = self.out.segments
            for k in range(first, len(found)):
                found[k] = replace(found[k], redirects=found[k].redirects + added)

    def _redirection(self, depth: int) -> str | None:
        """The redirection at the cursor (``> x``, ``2>&1``, ``&> x``); None if a word starts."""
        c, nxt = self._peek(), self._peek(1)
        if (c in "<>" and nxt != "(") or (c == "&" and nxt == ">"):
            return self._redirect("", depth)
        descriptor = _IO_NUMBER.match(self.s, self.i)
        if descriptor is None:
            return None
        self.i = descriptor.end()
        return self._redirect(descriptor.group(), depth)

    def _redirect(self, prefix: str, depth: int) -> str:
        s, i = self.s, self.i
        if s.startswith("<<", i):
            raise TooComplex("uses a here-document or here-string ('<<')")
        op = next(o for o in _REDIRECT_OPS if s.startswith(o, i))
        self.i += len(op)
        self._skip_blanks()
        c, nxt = self._peek(), self._peek(1)
        if c == "" or c in _WORD_END or (c in "<>" and nxt != "("):
            raise TooComplex(f"has a redirection '{prefix}{op}' without a target")
        target = self._word(depth)
        if op in (">&", "<&") and (_DIGITS.fullmatch(target.value) or target.value == "-"):
            return f"{prefix}{op}{target.value}"
        return f"{prefix}{op} {target.value}"

    # -- words -----------------------------------------------------------------

    def _word(self, depth: int) -> _Word:
        s, n = self.s, self.n
        start = self.i
        plain = _PLAIN_RUN.match(s, start)
        if plain is not None:
            end = plain.end()
            if end == n or s[end] in _WORD_END or (s[end] in "<>" and s[end + 1 : end + 2] != "("):
                # The common case: a word without quotes, expansions or patterns.
                self.i = end
                text = plain.group()
                return _Word(value=text, raw=text, literal=text)
        b = _WordBuilder()
        while self.i < n:
            i = self.i
            c = s[i]
            if c in _WORD_END:
                break
            if c in "<>":
                if self._peek(1) != "(":
                    break
                self.i += 2
                self.parse_list(self._nest(depth), ")")
                b.value.append(s[i : self.i])
                b.expanded = True
                continue
            if c == "\\":
                if i + 1 >= n:
                    raise TooComplex("ends with a lone backslash")
                escaped = s[i + 1]
                self.i += 2
                if escaped != "\n":
                    b.value.append(escaped)
                    b.literal.append(escaped)
                    b.quoted = True
                continue
            if c == "'":
                end = s.find("'", i + 1)
                if end < 0:
                    raise TooComplex("has an unterminated single quote")
                part = s[i + 1 : end]
                b.value.append(part)
                b.literal.append(part)
                b.quoted = True
                self.i = end + 1
                continue
            if c == '"':
                self.i += 1
                self._double_quoted(depth, b)
                b.quoted = True
                continue
            if self._expansion(c, depth, b, in_quotes=False):
                continue
            if c in "*?":
                b.splittable = True
            elif c == "[":
                b.bracket = True
            elif c == "{":
                b.brace = True
            else:
                match = _PLAIN_RUN.match(s, i)
                assert match is not None  # c is none of the characters the run excludes
                b.value.append(match.group())
                b.literal.append(match.group())
                self.i = match.end()
                continue
            b.value.append(c)
            b.literal.append(c)
            self.i += 1
        raw = s[start : self.i]
        splittable = b.splittable
        if b.bracket and "]" in raw[raw.index("[") :]:
            splittable = True  # a [...] glob; a lone '[' is the test command
        if b.brace and "}" in raw and ("," in raw or ".." in raw):
            splittable = True  # bash brace expansion: {rm,-rf,x} is three words
        return _Word(
            value="".join(b.value),
            raw=raw,
            expanded=b.expanded,
            splittable=splittable,
            quoted=b.quoted,
            literal="".join(b.literal),
        )

    def _double_quoted(self, depth: int, b: _WordBuilder) -> None:
        s, n = self.s, self.n
        while self.i < n:
            i = self.i
            c = s[i]
            if c == '"':
                self.i += 1
                return
            if c == "\\":
                escaped = self._peek(1)
                if escaped == "\n":
                    self.i += 2
                elif escaped and escaped in '$`"\\':
                    b.value.append(escaped)
                    b.literal.append(escaped)
                    self.i += 2
                else:
                    b.value.append("\\")
                    b.literal.append("\\")
                    self.i += 1
                continue
            if self._expansion(c, depth, b, in_quotes=True):
                continue
            match = _DQUOTED_RUN.match(s, i)
            assert match is not None
            b.value.append(match.group())
            b.literal.append(match.group())
            self.i = match.end()
        raise TooComplex("has an unterminated double quote")

    def _expansion(self, c: str, depth: int, b: _WordBuilder, *, in_quotes: bool) -> bool:
        """Read the ``$…`` or backquoted expansion at the cursor; false if ``c`` starts none."""
        if c == "$":
            self._dollar(depth, b, in_quotes=in_quotes)
        elif c == "`":
            self._backquoted(depth, b, in_quotes=in_quotes)
        else:
            return False
        return True

    def _dollar(self, depth: int, b: _WordBuilder, *, in_quotes: bool) -> None:
        s, i = self.s, self.i
        nxt = self._peek(1)
        if nxt == "(":
            if s.startswith("$((", i):
                self._arithmetic()
                b.splittable = b.splittable or not in_quotes  # IFS may hold digits
            else:
                self.i += 2
                self.parse_list(self._nest(depth), ")")
                b.splittable = b.splittable or not in_quotes
        elif nxt == "{":
            self._parameter_braces(depth, in_quotes=in_quotes)
            b.splittable = b.splittable or not in_quotes or s.startswith("${@", i)
        elif nxt == "'" and not in_quotes:
            decoded, end = _ansi_c(s, i + 2)
            b.value.append(decoded)
            b.literal.append(decoded)
            b.quoted = True
            self.i = end
            return
        elif nxt == '"' and not in_quotes:
            self.i += 2  # $"…": a translated string, otherwise double quotes
            self._double_quoted(depth, b)
            b.quoted = True
            return
        elif nxt == "[":
            raise TooComplex("uses the old '$[ … ]' arithmetic")
        elif nxt and nxt in "=~^+" and not in_quotes:
            # zsh reads $=x, $~x, $^x and $+x as expansions of x; bash and dash as text.
            self.i += 1
            b.splittable = True
        elif nxt and nxt in _PARAMETER_START:
            match = _PARAMETER.match(s, i + 1)
            assert match is not None
            self.i = match.end()
            b.splittable = b.splittable or not in_quotes or nxt == "@"
        else:
            b.value.append("$")  # a '$' that starts no expansion is a literal '$'
            b.literal.append("$")
            self.i += 1
            return
        b.value.append(s[i : self.i])
        b.expanded = True

    def _arithmetic(self) -> None:
        s, n = self.s, self.n
        j = self.i + 3
        open_parens = 0
        while j < n:
            c = s[j]
            if c == "(":
                open_parens += 1
            elif c == ")":
                if open_parens:
                    open_parens -= 1
                elif j + 1 < n and s[j + 1] == ")":
                    self.i = j + 2
                    return
                else:
                    raise TooComplex("has an ambiguous '$(( … )'")
            elif c not in _ARITHMETIC_CHARS:
                raise TooComplex(
                    "uses names or expansions in '$(( … ))' (bash evaluates a variable's "
                    "value as an expression, which can run commands); use digits only"
                )
            j += 1
        raise TooComplex("has an unterminated '$(('")

    def _parameter_braces(self, depth: int, *, in_quotes: bool) -> None:
        s, n = self.s, self.n
        inner = self._nest(depth)
        j = self.i + 2
        if j < n and s[j] == "!":
            raise TooComplex("uses indirect expansion '${!…}'")
        if j + 1 < n and s[j] == "#" and s[j + 1] != "}":
            j += 1
        name = _PARAMETER.match(s, j)
        if name is None:
            raise TooComplex("has a '${…}' without a parameter name")
        j = name.end()
        if j < n and s[j] == "[":
            end = s.find("]", j)
            subscript = s[j + 1 : end] if end > 0 else ""
            if not (subscript in ("@", "*") or _DIGITS.fullmatch(subscript)):
                raise TooComplex(
                    "uses an array subscript in '${…}' (bash evaluates it, which can run commands)"
                )
            j = end + 1
        if j < n and s[j] == "@":
            raise TooComplex("uses a '${…@…}' transformation (some expand text as a prompt)")
        scratch = _WordBuilder()
        while j < n:
            c = s[j]
            if c == "}":
                self.i = j + 1
                return
            if c == "{":
                raise TooComplex("has a '{' inside '${…}'")
            if c == "\\":
                j += 2
                continue
            if c in "'\"":
                if in_quotes:
                    # bash and dash disagree about quotes inside "${…}": where this one
                    # ends cannot be known for sure.
                    raise TooComplex("has quotes inside a double-quoted '${…}'")
                if c == "'":
                    end = s.find("'", j + 1)
                    if end < 0:
                        raise TooComplex("has an unterminated single quote")
                    j = end + 1
                else:
                    self.i = j + 1
                    self._double_quoted(inner, scratch)
                    j = self.i
                continue
            self.i = j
            if self._expansion(c, inner, scratch, in_quotes=True):
                j = self.i
                continue
            j += 1
        raise TooComplex("has an unterminated '${'")

    def _backquoted(self, depth: int, b: _WordBuilder, *, in_quotes: bool) -> None:
        s, n = self.s, self.n
        start = self.i
        escapable = '$`\\"' if in_quotes else "$`\\"
        body: list[str] = []
        j = start + 1
        while j < n:
            c = s[j]
            if c == "`":
                break
            if c == "\\" and j + 1 < n and s[j + 1] in escapable:
                body.append(s[j + 1])
                j += 2
                continue
            body.append(c)
            j += 1
        else:
            raise TooComplex("has an unterminated backquote")
        _Parser("".join(body), self.out).parse_list(self._nest(depth), None)
        self.i = j + 1
        b.value.append(s[start : self.i])
        b.expanded = True
        b.splittable = b.splittable or not in_quotes

    # -- commands --------------------------------------------------------------

    def _emit(
        self,
        words: list[_Word],
        assignments: tuple[str, ...],
        redirects: tuple[str, ...],
        depth: int,
    ) -> None:
        """Record a simple command and, iteratively, what its runners start."""
        if not words:
            self.out.add(Segment((), redirects, assignments))
            return
        first = words[0]
        name = first.value.rpartition("/")[2]
        if name not in _NEEDS_A_LOOK:
            # The common case: a program that is neither a runner nor a refused builtin.
            _check_command_word(first)
            argv = tuple(w.value for w in words)
            scan_end = 1 if first.value in _PRINTS_ONLY else None
            self.out.add(Segment(argv, redirects, assignments, scan_end=scan_end))
            return
        pending: list[_Inner] = [_Inner(words, assignments)]
        top = pending[0]
        while pending:
            started = pending.pop(0)
            command = started.words
            _check_command_word(command[0])
            argv = tuple(w.value for w in command)
            name = argv[0].rpartition("/")[2]
            refused = _REFUSED.get(name)
            if refused:
                raise TooComplex(refused)
            _check_builtin_arguments(name, command[1:])
            runner = _RUNNERS.get(name)
            items: list[_Started] = []
            opaque = ""
            if runner is not None:
                try:
                    items = runner(name, command[1:])
                except _CannotSee as exc:
                    opaque = str(exc)
                if (
                    started.open_ended
                    and not opaque
                    and (not items or name in _READS_ALL_ARGUMENTS)
                ):
                    opaque = (
                        f"xargs appends words from its input to '{name}', which would decide "
                        "what it runs"
                    )
                    items = []
            segment = Segment(
                argv,
                redirects,
                started.assignments,
                opaque=opaque,
                scan_end=_scan_end(command, items, top=started is top),
            )
            self.out.add(segment)
            redirects = ()  # only the outermost command carries the written redirections
            for item in items:
                if isinstance(item, str):
                    _Parser(item, self.out).parse_list(self._nest(depth), None)
                elif isinstance(item, _Inner):
                    pending.append(replace(item, open_ended=item.open_ended or started.open_ended))


def _scan_end(command: Sequence[_Word], items: Sequence[_Started], *, top: bool) -> int | None:
    """Where a segment's words that could name an unseen program end (see Segment.scan_end).

    A builtin that only prints is trusted as such only where the line runs it: behind a
    runner, a mistake in reading the runner's options could make it something else.
    """
    if (top and command[0].value in _PRINTS_ONLY) or any(isinstance(i, _Inert) for i in items):
        return 1
    starts = [
        next((i for i, word in enumerate(command) if word is item.words[0]), None)
        for item in items
        if isinstance(item, _Inner)
    ]
    found = [i for i in starts if i is not None]
    return min(found) if found else None


# -- word checks ---------------------------------------------------------------


def _assignment(word: _Word) -> str:
    _check_assigned_value(word)
    return word.value


def _check_assigned_value(word: _Word) -> None:
    # PS4='$(cmd)' with set -x, or a value later read by bash arithmetic, turns quoted
    # text back into a command: a quoted substitution in a variable is not judged.
    literal = word.literal
    if "$(" in literal or "`" in literal or "${" in literal:
        raise TooComplex(
            f"assigns text that holds a command substitution ({word.raw}); it could run later"
        )


def _check_command_word(word: _Word) -> None:
    if word.expanded:
        raise TooComplex(f"has a variable or substitution where a program name goes ({word.raw})")
    if word.splittable:
        raise TooComplex(f"has a pattern where a program name goes ({word.raw})")
    if word.value.startswith("="):
        raise TooComplex(f"has a program name starting with '=' ({word.raw}), which zsh expands")


def _check_builtin_arguments(name: str, args: Sequence[_Word]) -> None:
    """Bash builtins that evaluate array subscripts in their operands can run commands."""
    if name in ("test", "[") and any(w.value in ("-v", "-R") for w in args):
        raise TooComplex(f"uses '{name} -v' (bash evaluates the array subscript it names)")
    if name == "printf" and any(w.value == "-v" or "%(" in w.value for w in args):
        raise TooComplex("uses 'printf -v' or '%(…)T' (bash evaluates names it is given)")
    if name == "read" and any("[" in w.value for w in args):
        raise TooComplex("reads into an array element (bash evaluates the subscript)")
    if name == "export":
        for w in args:
            if _ASSIGNMENT.match(w.raw):
                _check_assigned_value(w)


def _surely_operand(word: _Word) -> bool:
    """Whether a word's value cannot start with '-' or '+' whatever its expansions give."""
    first = word.raw.lstrip("\"'")[:1]  # "rm $X" starts with r, whatever $X holds
    return bool(first) and _PLAIN_RUN.match(first) is not None and first not in "-+"


#: A long option's name written literally before '=': ``--log-file=`` in ``--log-file="$F"``.
_LITERAL_OPTION_NAME = re.compile(r"--[A-Za-z0-9][A-Za-z0-9._-]*=")


def _interpreted(runner: str, word: _Word) -> str:
    """The text of a word a runner interprets (an option, a name): it must be literal.

    A long option whose name is literal may take its value from an expansion
    (``--log-file="$F"``): the value is data, the name says what the word is.
    """
    if word.expanded and not word.splittable and _LITERAL_OPTION_NAME.match(word.raw):
        return word.value
    if word.expanded or word.splittable:
        raise _CannotSee(
            f"{runner}: '{word.raw}' is known only when the command runs, and {runner} "
            "reads its options and command from it"
        )
    return word.value


def _single(runner: str, word: _Word) -> str:
    """An option's argument or an operand a runner consumes: it must stay one word."""
    if word.splittable:
        raise _CannotSee(f"{runner}: '{word.raw}' could split into several words")
    return word.value


def _script(runner: str, word: _Word) -> str:
    """A script a shell will parse: its text must be known now."""
    if word.expanded:
        raise TooComplex(f"{runner} runs a script that is not literal text ({word.raw})")
    return word.value


# -- runners -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Options:
    """The options a runner accepts, getopt style; anything else is refused."""

    flags: str = ""
    with_arg: str = ""
    #: Short options whose argument, if any, is glued to them (xargs -i[R]).
    glued_arg: str = ""
    long_flags: frozenset[str] = frozenset()
    long_with_arg: frozenset[str] = frozenset()
    long_optional: frozenset[str] = frozenset()
    #: Accepts -N / --N as a number (nice -10).
    numeric: bool = False
    #: Accepts +x clusters as well (shell options).
    plus: bool = False
    #: Options may follow operands (GNU getopt without '+').
    permute: bool = False


def _options(
    runner: str,
    words: Sequence[_Word],
    spec: _Options,
    values: list[tuple[str, str]] | None = None,
) -> tuple[list[_Word], dict[str, str]]:
    """Split ``words`` into operands and the options seen (name → argument, or "").

    Long options may be abbreviated, as GNU getopt_long allows (``--sig`` is
    ``--signal``). An option the spec does not know, or an ambiguous abbreviation,
    raises :class:`_CannotSee`: where the command starts is then unknown. ``values``,
    when given, collects every option's argument in order (``-E A=1 -E B=2``).
    """
    seen: dict[str, str] = {}
    operands: list[_Word] = []
    i = 0
    count = len(words)

    def argument(index: int, option: str) -> str:
        if index >= count:
            raise TooComplex(f"{runner}: option {option} needs a value")
        return _single(runner, words[index])

    def record(option: str, value: str) -> None:
        seen[option] = value
        if values is not None:
            values.append((option, value))

    while i < count:
        word = words[i]
        if (word.expanded or word.splittable) and _surely_operand(word):
            is_option = False
        else:
            text = _interpreted(runner, word)
            is_option = len(text) > 1 and (text[0] == "-" or (spec.plus and text[0] == "+"))
        if not is_option:
            if not spec.permute:
                break
            operands.append(word)
            i += 1
            continue
        if text == "--":
            i += 1
            break
        if text.startswith("--"):
            option, equals, value = text.partition("=")
            if spec.numeric and option[2:].isdigit():
                record("-n", option[2:])
                i += 1
                continue
            option = _long_option(runner, option, spec)
            if option in spec.long_flags:
                if equals:
                    raise _CannotSee(f"{runner}: option {option} takes no value")
                record(option, "")
            elif option in spec.long_with_arg:
                if not equals:
                    i += 1
                    value = argument(i, option)
                record(option, value)
            else:
                record(option, value)  # an optional argument is only ever given after '='
            i += 1
            continue
        body = text[1:]
        if spec.numeric and body.isdigit():
            record("-n", body)
            i += 1
            continue
        k = 0
        while k < len(body):
            letter = body[k]
            if letter in spec.flags:
                record(letter, "")
                k += 1
            elif letter in spec.with_arg:
                if k + 1 < len(body):
                    record(letter, body[k + 1 :])
                else:
                    i += 1
                    record(letter, argument(i, f"-{letter}"))
                break
            elif letter in spec.glued_arg:
                record(letter, body[k + 1 :])
                break
            else:
                raise _CannotSee(f"{runner}: unknown option -{letter}")
        i += 1
    operands.extend(words[i:])
    return operands, seen


def _long_option(runner: str, option: str, spec: _Options) -> str:
    """The long option ``option`` names, resolving an unambiguous abbreviation."""
    known = spec.long_flags | spec.long_with_arg | spec.long_optional
    if option in known:
        return option
    candidates = sorted(name for name in known if name.startswith(option))
    if len(candidates) == 1:
        return candidates[0]
    if candidates:
        raise _CannotSee(f"{runner}: option {option} is ambiguous ({', '.join(candidates)})")
    raise _CannotSee(f"{runner}: unknown option {option}")


def _leading_assignments(runner: str, words: Sequence[_Word]) -> tuple[tuple[str, ...], int]:
    found: list[str] = []
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i].raw):
        _single(runner, words[i])
        _check_assigned_value(words[i])
        found.append(words[i].value)
        i += 1
    return tuple(found), i


def _rest(words: Sequence[_Word], assignments: tuple[str, ...] = ()) -> list[_Started]:
    return [_Inner(words, assignments)] if words else []


#: The options that make a runner print its help or version and run nothing.
_HELP = frozenset({"h", "V", "--help", "--version"})


_ENV = _Options(
    flags="i0v",
    with_arg="uCSPa",
    long_flags=frozenset(
        {"--ignore-environment", "--null", "--debug", "--list-signal-handling"}
        | {"--help", "--version"}
    ),
    long_with_arg=frozenset({"--unset", "--chdir", "--split-string", "--argv0"}),
    long_optional=frozenset({"--block-signal", "--default-signal", "--ignore-signal"}),
)


def _env(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _ENV)
    if "S" in seen or "--split-string" in seen:
        raise TooComplex("env -S splits a string into a command line, which is not judged")
    if operands and operands[0].value == "-" and not operands[0].expanded:
        operands = operands[1:]  # `env -` is `env -i`
    assignments, start = _leading_assignments(runner, operands)
    return _rest(operands[start:], assignments)


_SUDO = _Options(
    flags="AbEeHiKklnPSsVvBN",
    with_arg="CDghprRtTUu",
    long_flags=frozenset(
        {
            "--askpass",
            "--background",
            "--bell",
            "--edit",
            "--set-home",
            "--login",
            "--remove-timestamp",
            "--reset-timestamp",
            "--list",
            "--non-interactive",
            "--preserve-groups",
            "--stdin",
            "--shell",
            "--validate",
            "--version",
            "--help",
        }
    ),
    long_with_arg=frozenset(
        {
            "--close-from",
            "--chdir",
            "--group",
            "--host",
            "--prompt",
            "--role",
            "--type",
            "--command-timeout",
            "--other-user",
            "--user",
            "--chroot",
        }
    ),
    long_optional=frozenset({"--preserve-env"}),
)
_SUDO_RUNS_NOTHING = frozenset(
    {"e", "--edit", "l", "--list", "v", "--validate", "V", "--version", "K"}
    | {"--remove-timestamp", "--help"}
)


def _sudo(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _SUDO)
    if _SUDO_RUNS_NOTHING.intersection(seen):
        return []
    assignments, start = _leading_assignments(runner, operands)
    command = operands[start:]
    if not command and {"s", "i", "--shell", "--login"}.intersection(seen):
        raise TooComplex(f"{runner} -s/-i without a command starts a shell that reads its input")
    return _rest(command, assignments)


_DOAS = _Options(flags="nsL", with_arg="auC")


def _doas(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _DOAS)
    if not operands and "s" in seen:
        raise TooComplex("doas -s starts a shell that reads its input")
    return _rest(operands)


_SU = _Options(
    flags="lmpfPThV",
    with_arg="cgGsw",
    long_flags=frozenset(
        {"--login", "--preserve-environment", "--fast", "--pty", "--no-pty"}
        | {"--help", "--version"}
    ),
    long_with_arg=frozenset(
        {
            "--command",
            "--session-command",
            "--group",
            "--supp-group",
            "--shell",
            "--whitelist-environment",
        }
    ),
    permute=True,
)
_SCRIPT = _Options(
    flags="aefqhV",
    with_arg="cEBIOTm",
    glued_arg="t",
    long_flags=frozenset({"--append", "--return", "--flush", "--force", "--quiet", "--help"}),
    long_with_arg=frozenset(
        {
            "--command",
            "--echo",
            "--log-io",
            "--log-in",
            "--log-out",
            "--log-timing",
            "--logging-format",
        }
    ),
    long_optional=frozenset({"--timing"}),
    permute=True,
)


def _command_string(
    runner: str,
    words: Sequence[_Word],
    spec: _Options,
    refuse: Callable[[str], Exception] = TooComplex,
) -> list[_Started]:
    """su, runuser and script: the command is the text of -c, other operands are no program.

    ``refuse`` builds what is raised when the runner starts a shell that reads its input
    or hands it more words (runuser's, a newer cousin's, only marks its segment opaque).
    """
    string_options = ("c", "--command", "--session-command")
    operands, seen = _options(runner, words, spec)
    if runner in ("su", "runuser"):
        operands = [w for w in operands if w.value != "-"]
        if len(operands) > 1:
            raise refuse(f"{runner} passes its extra arguments to a shell, which is not judged")
    elif len(operands) > 1:
        raise refuse(f"{runner}: unexpected arguments")
    given = [seen[o] for o in string_options if o in seen]
    if not given:
        if seen.keys() & _HELP:
            return []
        raise refuse(f"{runner} without -c starts a shell that reads its input")
    # The script is an option's value: refuse it if the word it came from is not literal.
    for word in words:
        if word.value in given and word.expanded:
            raise TooComplex(f"{runner} runs a script that is not literal text ({word.raw})")
    return list(given)


_NOHUP = _Options(long_flags=frozenset({"--help", "--version"}))
_TIMEOUT = _Options(
    flags="vfp",
    with_arg="ks",
    long_flags=frozenset({"--foreground", "--preserve-status", "--verbose", "--help", "--version"}),
    long_with_arg=frozenset({"--kill-after", "--signal"}),
)
_NICE = _Options(
    with_arg="n",
    long_flags=frozenset({"--help", "--version"}),
    long_with_arg=frozenset({"--adjustment"}),
    numeric=True,
)
_IONICE = _Options(
    flags="tVh",
    with_arg="cnpPu",
    long_flags=frozenset({"--ignore", "--help", "--version"}),
    long_with_arg=frozenset({"--class", "--classdata", "--pid", "--pgid", "--uid"}),
)
_TIME = _Options(
    flags="apqvV",
    with_arg="fo",
    long_flags=frozenset(
        {"--append", "--verbose", "--quiet", "--portability", "--help", "--version"}
    ),
    long_with_arg=frozenset({"--format", "--output"}),
)
_COMMAND = _Options(flags="pvV")
_EXEC = _Options(flags="cl", with_arg="a")
_STDBUF = _Options(
    with_arg="ioe",
    long_flags=frozenset({"--help", "--version"}),
    long_with_arg=frozenset({"--input", "--output", "--error"}),
)
_CHROOT = _Options(
    long_flags=frozenset({"--skip-chdir", "--help", "--version"}),
    long_with_arg=frozenset({"--userspec", "--groups"}),
)
_SETSID = _Options(
    flags="cfwhV",
    long_flags=frozenset({"--ctty", "--fork", "--wait", "--help", "--version"}),
)
_WATCH = _Options(
    flags="bcCegtwxprh",
    with_arg="nqs",
    glued_arg="d",
    long_flags=frozenset(
        {
            "--beep",
            "--color",
            "--no-color",
            "--errexit",
            "--chgexit",
            "--no-title",
            "--no-wrap",
            "--exec",
            "--precise",
            "--no-rerun",
            "--help",
            "--version",
        }
    ),
    long_with_arg=frozenset({"--interval", "--equexit", "--shotsdir"}),
    long_optional=frozenset({"--differences"}),
)
_XARGS = _Options(
    flags="0prtxo",
    with_arg="EIaLnsPd",
    glued_arg="eil",
    long_flags=frozenset(
        {
            "--null",
            "--interactive",
            "--no-run-if-empty",
            "--verbose",
            "--exit",
            "--open-tty",
            "--show-limits",
            "--help",
            "--version",
        }
    ),
    long_with_arg=frozenset(
        {
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--process-slot-var",
        }
    ),
    long_optional=frozenset({"--replace", "--eof", "--max-lines"}),
)
_SHELL = _Options(
    flags="abefhiklmnprstuvxBCEHPTcs",
    with_arg="oO",
    long_flags=frozenset(
        {
            "--norc",
            "--noprofile",
            "--login",
            "--posix",
            "--noediting",
            "--restricted",
            "--verbose",
            "--version",
            "--help",
        }
    ),
    long_with_arg=frozenset({"--rcfile", "--init-file"}),
    plus=True,
)


def _simple_runner(spec: _Options) -> Callable[[str, Sequence[_Word]], list[_Started]]:
    def run(runner: str, words: Sequence[_Word]) -> list[_Started]:
        operands, _ = _options(runner, words, spec)
        return _rest(operands)

    return run


def _timeout(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, _ = _options(runner, words, _TIMEOUT)
    if not operands:
        return []
    _single(runner, operands[0])  # the duration
    return _rest(operands[1:])


def _ionice(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _IONICE)
    if {"p", "P", "u", "--pid", "--pgid", "--uid"}.intersection(seen):
        return []  # it changes running processes, the operands are ids
    return _rest(operands)


def _command(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _COMMAND)
    if "v" in seen or "V" in seen:
        return [_RUNS_NOTHING]  # only says what a name is
    return _rest(operands)


def _builtin(runner: str, words: Sequence[_Word]) -> list[_Started]:
    return _rest(words)


def _chroot(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _CHROOT)
    if not operands:
        return []
    _single(runner, operands[0])  # the new root
    if len(operands) == 1 and not seen.keys() & {"--help", "--version"}:
        raise TooComplex("chroot without a command starts a shell that reads its input")
    return _rest(operands[1:])


def _watch(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _WATCH)
    if "x" in seen or "--exec" in seen:
        return _rest(operands)
    if not operands:
        return []
    # Without -x, watch joins its arguments with spaces and hands them to sh -c.
    return [" ".join(_script(runner, w) for w in operands)]


def _xargs(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _XARGS)
    if "I" in seen:
        replace_with: str | None = seen["I"]
    elif "i" in seen or "--replace" in seen:
        replace_with = seen.get("i") or seen.get("--replace") or "{}"
    else:
        replace_with = None
    if not operands:
        return []
    if replace_with:
        if replace_with in operands[0].value:
            raise TooComplex("xargs takes the program to run from its input")
        # Each input line replaces the placeholder: those words are known only at run time.
        return [_Inner(_from_input(operands, replace_with))]
    return [_Inner(operands, open_ended=True)]


def _from_input(words: Sequence[_Word], placeholder: str) -> list[_Word]:
    """``words`` with those holding ``placeholder`` marked as expanded at run time."""
    return [replace(w, expanded=True) if placeholder in w.value else w for w in words]


_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _find(runner: str, words: Sequence[_Word]) -> list[_Started]:
    for word in words:
        if word.expanded or word.splittable:
            raise TooComplex(
                f"find: '{word.raw}' is not literal text (an expansion or an unquoted "
                "pattern could add -exec); quote patterns"
            )
    started: list[_Started] = []
    i = 0
    while i < len(words):
        action = words[i].value
        if action not in _FIND_EXEC:
            i += 1
            continue
        start = j = i + 1
        while j < len(words):
            value = words[j].value
            if value == ";" or (value == "+" and j > start and words[j - 1].value == "{}"):
                break
            j += 1
        else:
            raise TooComplex(f"find {action} without a closing ';' or '+'")
        command = words[start:j]
        if not command:
            raise TooComplex(f"find {action} without a command")
        if "{}" in command[0].value:
            raise TooComplex(f"find {action} runs the files it finds")
        # find puts file names wherever {} appears, even inside a word (sh -c 'echo {}').
        started.append(_Inner(_from_input(command, "{}")))
        i = j + 1
    return started


def _shell(runner: str, words: Sequence[_Word]) -> list[_Started]:
    try:
        operands, seen = _options(runner, words, _SHELL)
    except _CannotSee as exc:
        # A shell's options decide how it reads its script: not knowing them is not
        # knowing the code it runs (`bash "$X" -c …`, `bash --frob -c …`).
        raise TooComplex(str(exc)) from None
    if "--version" in seen or "--help" in seen:
        return []
    if "c" in seen:
        if not operands:
            raise TooComplex(f"{runner} -c without a script")
        return [_script(runner, operands[0])]
    if "s" in seen or not operands:
        raise TooComplex(f"{runner} reads commands from its input, which is not judged")
    return []  # runs a script file: judged as this segment only


def _other_shell(runner: str, words: Sequence[_Word]) -> list[_Started]:
    raise TooComplex(f"{runner} is not a POSIX shell; its commands cannot be judged")


# -- more runners: locks, scheduling, limits, namespaces, users, tracers, sandboxes ---

_FLOCK = _Options(
    flags="sexnoFuhVc",
    with_arg="wE",
    long_flags=frozenset(
        {"--shared", "--exclusive", "--unlock", "--nonblocking", "--nb", "--close"}
        | {"--no-fork", "--verbose", "--fcntl", "--command", "--help", "--version"}
    ),
    long_with_arg=frozenset(
        {"--timeout", "--wait", "--conflict-exit-code", "--start", "--length", "--fd"}
    ),
)


def _flock(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """``flock [opts] FILE COMMAND…``, ``FILE -c STRING``, ``--fd N COMMAND…`` or ``-c STRING``."""
    operands, seen = _options(runner, words, _FLOCK)
    if seen.keys() & _HELP:
        return []
    if seen.keys() & {"c", "--command"}:
        # util-linux 2.41+: `flock --fd N -c STRING`; older ones refuse -c before the file.
        return [_script(runner, operands[0])] if len(operands) == 1 else []
    if "--fd" in seen:
        return _rest(operands)
    if len(operands) < 2:
        return []  # a file descriptor to lock, nothing to run
    _single(runner, operands[0])  # the lock file or directory
    _check_command_word(operands[1])  # the program, or -c
    if operands[1].value in ("-c", "--command"):
        return [_script(runner, operands[2])] if len(operands) == 3 else []
    return _rest(operands[1:])


_TASKSET = _Options(
    flags="apchV",
    long_flags=frozenset({"--all-tasks", "--pid", "--cpu-list", "--help", "--version"}),
)


def _a_process(pid: str) -> bool:
    """Whether ``pid`` surely names another process: with pid 0 some versions of taskset
    and prlimit act on themselves, then run their command."""
    return _DIGITS.fullmatch(pid) is not None and int(pid) != 0


def _taskset(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """``taskset [opts] MASK COMMAND…``; ``-p [MASK] PID`` changes a running process."""
    operands, seen = _options(runner, words, _TASKSET)
    if seen.keys() & _HELP or not operands:
        return []
    if seen.keys() & {"p", "--pid"} and _a_process(operands[-1].value):
        return []  # taskset reads the pid from its last word
    _single(runner, operands[0])  # the mask or CPU list
    return _rest(operands[1:])


_NUMACTL = _Options(
    flags="abslHtdDTuVh",
    with_arg="iwpPcNCmSfoLMI",
    long_flags=frozenset(
        {"--all", "--balancing", "--show", "--localalloc", "--hardware", "--strict"}
        | {"--dump", "--dump-nodes", "--touch", "--huge", "--verify", "--help", "--version"}
    ),
    long_with_arg=frozenset(
        {"--interleave", "--weighted-interleave", "--preferred", "--preferred-many"}
        | {"--cpubind", "--cpunodebind", "--physcpubind", "--membind", "--shm", "--file"}
        | {"--offset", "--length", "--shmmode", "--shmid"}
    ),
)
#: numactl options after which it runs no command (it shows, or sets a policy on memory).
_NUMACTL_RUNS_NOTHING = frozenset(
    {"s", "--show", "H", "--hardware", "h", "--help", "--version", "S", "--shm", "f", "--file"}
)


def _numactl(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _NUMACTL)
    if seen.keys() & _NUMACTL_RUNS_NOTHING:
        return []
    return _rest(operands)


_SETARCH = _Options(
    flags="hVv3BFILRSTXZ",
    with_arg="p",
    long_flags=frozenset(
        {"--help", "--version", "--verbose", "--addr-no-randomize", "--fdpic-funcptrs"}
        | {"--mmap-page-zero", "--addr-compat-layout", "--read-implies-exec", "--32bit"}
        | {"--short-inode", "--whole-seconds", "--sticky-timeouts", "--3gb", "--4gb"}
        | {"--uname-2.6", "--list"}
    ),
    long_with_arg=frozenset({"--pid"}),
    long_optional=frozenset({"--show"}),
)
#: The names setarch also answers to, each setting a personality (util-linux's table).
_SETARCH_ALIASES = frozenset(
    {"uname26", "linux32", "linux64", "i386", "i486", "i586", "i686", "athlon", "x86_64"}
    | {"ia64", "ppc", "ppc32", "ppc32le", "ppcle", "ppc64", "ppc64le", "ppc64pseries"}
    | {"ppc64iseries", "s390", "s390x", "sparc", "sparc32", "sparc64", "mips", "mips32"}
    | {"mips64", "parisc", "parisc32", "parisc64", "alpha", "alphaev5", "alphaev56"}
    | {"alphaev6", "alphaev67", "arm", "armh", "armv7b", "armv7l", "armv8b", "armv8l"}
    | {"arm64", "aarch64", "e2k", "e2kv4", "e2kv5", "e2kv6", "e2k4c", "e2k8c", "e2k1cp"}
    | {"e2k8c2", "e2k12c", "e2k16c", "e2k2c3", "loongarch", "loongarch64", "riscv32"}
    | {"riscv64", "rv32", "rv64"}
)


def _setarch(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """``setarch [ARCH] [opts] [PROGRAM…]``, or an alias (``linux32``, ``x86_64``) without ARCH."""
    if runner == "setarch":
        if not words:
            return []  # an error: no architecture
        if _surely_operand(words[0]) or not _interpreted(runner, words[0]).startswith("-"):
            words = words[1:]  # the architecture: setarch "$(uname -m)" -R prog
    operands, seen = _options(runner, words, _SETARCH)
    if seen.keys() & (_HELP | {"--list", "--show"}):
        return []
    if not operands:
        raise _CannotSee(f"{runner} without a program starts a shell that reads its input")
    return _rest(operands)


def _sparc32bash(runner: str, words: Sequence[_Word]) -> list[_Started]:
    raise _CannotSee(f"{runner} starts a shell that reads its input")


_PRLIMIT = _Options(
    flags="hV",
    with_arg="po",
    glued_arg="cdefilmnqrstuvxy",  # -n10 sets a limit; `-n 10` shows it, and 10 is the command
    long_flags=frozenset({"--noheadings", "--raw", "--verbose", "--help", "--version"}),
    long_with_arg=frozenset({"--pid", "--output"}),
    long_optional=frozenset(
        {"--as", "--core", "--cpu", "--data", "--fsize", "--locks", "--memlock", "--msgqueue"}
        | {"--nice", "--nofile", "--nproc", "--rss", "--rtprio", "--rttime", "--sigpending"}
        | {"--stack"}
    ),
)


def _prlimit(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """``prlimit [opts] [--RESOURCE=LIMIT…] COMMAND…``; with --pid it changes a running process."""
    operands, seen = _options(runner, words, _PRLIMIT)
    pid = seen.get("p", seen.get("--pid"))
    if seen.keys() & _HELP or (pid is not None and _a_process(pid)):
        return []
    return _rest(operands)


_CHRT = _Options(
    flags="abdefiphmoOrRGvV",
    with_arg="DPTUX",
    long_flags=frozenset(
        {"--all-tasks", "--batch", "--deadline", "--deadline-overrun", "--ext", "--fifo"}
        | {"--idle", "--pid", "--help", "--max", "--other", "--rr", "--reset-on-fork"}
        | {"--reclaim-grub", "--verbose", "--version"}
    ),
    long_with_arg=frozenset(
        {"--clamp-min", "--clamp-max", "--sched-runtime", "--sched-period", "--sched-deadline"}
    ),
)
#: Policies that need no priority: util-linux 2.40+ then reads the first operand as the command.
_CHRT_NO_PRIORITY = frozenset(
    {"b", "--batch", "i", "--idle", "o", "--other", "d", "--deadline", "e", "--ext"}
)


def _chrt(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """``chrt [opts] [PRIORITY] COMMAND…``; with -p it changes a running process."""
    operands, seen = _options(runner, words, _CHRT)
    if seen.keys() & (_HELP | {"p", "--pid", "m", "--max"}) or not operands:
        return []
    first = operands[0]
    if len(operands) > 1:
        if first.expanded or first.splittable:
            if seen.keys() & _CHRT_NO_PRIORITY:
                raise _CannotSee(f"{runner}: '{first.raw}' may be the priority or the program")
            _single(runner, first)
            operands = operands[1:]
        elif _DIGITS.fullmatch(first.value):
            operands = operands[1:]  # the priority
        if operands and operands[0].value == "--" and not operands[0].expanded:
            operands = operands[1:]  # chrt 1 -- COMMAND
    return _rest(operands)


_CHOOM = _Options(
    flags="hV",
    with_arg="np",
    long_flags=frozenset({"--help", "--version"}),
    long_with_arg=frozenset({"--adjust", "--pid"}),
    permute=True,
)


def _choom(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """``choom [opts] -n SCORE [--] COMMAND…``; with -p it changes a running process."""
    operands, seen = _options(runner, words, _CHOOM)
    if seen.keys() & (_HELP | {"p", "--pid"}):
        return []
    return _rest(operands)


_UCLAMPSET = _Options(
    flags="asRhvV",
    with_arg="pmM",
    long_flags=frozenset(
        {"--all-tasks", "--system", "--reset-on-fork", "--help", "--verbose", "--version"}
    ),
    long_with_arg=frozenset({"--pid"}),
)


def _uclampset(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """``uclampset [opts] [-m MIN] [-M MAX] COMMAND…``; -p and -s change other things."""
    operands, seen = _options(runner, words, _UCLAMPSET)
    if seen.keys() & (_HELP | {"p", "--pid", "s", "--system"}):
        return []
    return _rest(operands)


_UNSHARE = _Options(
    flags="fhVmuinpCTUrc",
    with_arg="RwSGl",
    long_flags=frozenset(
        {"--help", "--version", "--fork", "--forward-signals", "--map-root-user"}
        | {"--map-current-user", "--map-auto", "--map-subids", "--keep-caps", "--clear-env"}
    ),
    long_with_arg=frozenset(
        {"--map-user", "--map-users", "--map-group", "--map-groups", "--owner"}
        | {"--propagation", "--setgroups", "--setuid", "--setgid", "--root", "--wd"}
        | {"--monotonic", "--boottime", "--load-interp", "--whitelist-env"}
    ),
    long_optional=frozenset(
        {"--mount", "--uts", "--ipc", "--net", "--pid", "--user", "--cgroup", "--time"}
        | {"--kill-child", "--mount-proc", "--mount-binfmt"}
    ),
)
_NSENTER = _Options(
    flags="ahVecFZ",
    with_arg="tNSG",
    glued_arg="muinpCUTrwW",
    long_flags=frozenset(
        {"--all", "--help", "--version", "--env", "--no-fork", "--join-cgroup"}
        | {"--preserve-credentials", "--keep-caps", "--user-parent", "--follow-context"}
    ),
    long_with_arg=frozenset({"--target", "--net-socket", "--setuid", "--setgid"}),
    long_optional=frozenset(
        {"--mount", "--uts", "--ipc", "--net", "--pid", "--user", "--cgroup", "--time"}
        | {"--root", "--wd", "--wdns"}
    ),
)
_FAKEROOT = _Options(
    flags="uhv",
    with_arg="lsib",
    long_flags=frozenset({"--unknown-is-real", "--help", "--version"}),
    long_with_arg=frozenset({"--lib", "--faked"}),
)
_PKEXEC = _Options(
    long_flags=frozenset({"--disable-internal-agent", "--keep-cwd", "--help", "--version"}),
    long_with_arg=frozenset({"--user"}),
)


def _shell_when_bare(spec: _Options) -> Callable[[str, Sequence[_Word]], list[_Started]]:
    """A runner that starts a shell (reading its input) when it is given no program."""

    def run(runner: str, words: Sequence[_Word]) -> list[_Started]:
        operands, seen = _options(runner, words, spec)
        if seen.keys() & {"h", "--help", "--version"}:
            return []
        if not operands:
            raise _CannotSee(f"{runner} without a program starts a shell that reads its input")
        return _rest(operands)

    return run


_SETPRIV = _Options(
    flags="dhV",
    long_flags=frozenset(
        {"--dump", "--nnp", "--no-new-privs", "--list-caps", "--clear-groups"}
        | {"--keep-groups", "--init-groups", "--landlock-support", "--list-landlock-access"}
        | {"--help", "--reset-env", "--version"}
    ),
    long_with_arg=frozenset(
        {"--inh-caps", "--ambient-caps", "--ruid", "--euid", "--rgid", "--egid", "--reuid"}
        | {"--regid", "--groups", "--bounding-set", "--securebits", "--pdeathsig", "--ptracer"}
        | {"--selinux-label", "--apparmor-profile", "--landlock-access", "--landlock-rule"}
        | {"--list-landlock-rights", "--seccomp-filter"}
    ),
)
_SETPRIV_RUNS_NOTHING = frozenset(
    {"d", "--dump", "--list-caps", "--landlock-support", "--list-landlock-access"}
    | {"--list-landlock-rights"}
)


def _setpriv(runner: str, words: Sequence[_Word]) -> list[_Started]:
    operands, seen = _options(runner, words, _SETPRIV)
    if seen.keys() & (_HELP | _SETPRIV_RUNS_NOTHING):
        return []
    return _rest(operands)


_RUNUSER = replace(_SU, with_arg=_SU.with_arg + "u", long_with_arg=_SU.long_with_arg | {"--user"})


def _runuser(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """``runuser -u USER [--] COMMAND…`` runs COMMAND; without -u it behaves like su."""
    operands, seen = _options(runner, words, _RUNUSER)
    if seen.keys() & _HELP:
        return []
    if not seen.keys() & {"u", "--user"}:
        return _command_string(runner, words, _RUNUSER, refuse=_CannotSee)
    if seen.keys() & {"c", "--command", "--session-command", "f", "--fast", "s", "--shell"}:
        return []  # runuser refuses these with -u
    if seen.keys() & {"l", "--login"}:
        return []
    return _rest(operands)


def _sg(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """``sg [-] GROUP [-c] STRING [ARG…]``: sh -c STRING, the other words its $0, $1…"""
    rest = list(words)
    if rest and rest[0].value == "-" and not rest[0].expanded:
        rest = rest[1:]
    if not rest:
        return []  # an error: no group
    _single(runner, rest[0])  # the group
    rest = rest[1:]
    if rest and rest[0].value == "-c" and not rest[0].expanded:
        rest = rest[1:]
    if not rest:
        raise _CannotSee(f"{runner} without a command starts a shell that reads its input")
    return [_script(runner, rest[0])]


def _newgrp(runner: str, words: Sequence[_Word]) -> list[_Started]:
    raise _CannotSee(f"{runner} starts a shell that reads its input")


def _user_then_command(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """gosu and su-exec: ``USER[:GROUP] COMMAND…``."""
    if not words or _interpreted(runner, words[0]).startswith("-"):
        return []  # --help, --version
    _single(runner, words[0])
    return _rest(words[1:])


_RUNCON = _Options(
    flags="c",
    with_arg="rtul",
    long_flags=frozenset({"--compute", "--help", "--version"}),
    long_with_arg=frozenset({"--role", "--type", "--user", "--range"}),
)


def _runcon(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """``runcon CONTEXT COMMAND…`` or ``runcon [-c] [-u U] [-r R] [-t T] [-l L] COMMAND…``."""
    operands, seen = _options(runner, words, _RUNCON)
    if seen.keys() & _HELP or not operands:
        return []
    if not seen.keys() - _HELP:
        _single(runner, operands[0])  # the context
        operands = operands[1:]
    return _rest(operands)


_STRACE = _Options(
    flags="AcCdDfFhiknNqrtTvVwxyYzZ",
    with_arg="abeEIoOpPsSuUX",
    long_flags=frozenset(
        {"--output-append-mode", "--summary-only", "--summary", "--debug", "--follow-forks"}
        | {"--output-separately", "--help", "--instruction-pointer", "--kill-on-exit"}
        | {"--syscall-number", "--arg-names", "--no-abbrev", "--version"}
        | {"--summary-wall-clock", "--pidns-translation", "--successful-only"}
        | {"--failed-only", "--failing-only", "--seccomp-bpf", "--always-show-pid"}
    ),
    long_with_arg=frozenset(
        {"--columns", "--detach-on", "--env", "--interruptible", "--stack-trace-frame-limit"}
        | {"--syscall-limit", "--output", "--summary-syscall-overhead", "--attach"}
        | {"--trace-path", "--string-limit", "--summary-sort-by", "--user"}
        | {"--summary-columns", "--const-print-style", "--argv0", "--color", "--trace"}
        | {"--trace-fds", "--abbrev", "--verbose", "--raw", "--signals", "--status", "--read"}
        | {"--write", "--fault", "--inject", "--kvm", "--decode-pids"}
    ),
    long_optional=frozenset(
        {"--daemonize", "--daemonised", "--daemonized", "--stack-trace", "--stack-traces"}
        | {"--relative-timestamps", "--absolute-timestamps", "--timestamps"}
        | {"--syscall-times", "--strings-in-hex", "--tips", "--namespace", "--quiet"}
        | {"--silent", "--silence", "--decode-fds", "--secontext"}
    ),
)
_LTRACE = _Options(
    flags="bcCfhiLrStTV",
    with_arg="aADeFlnopsuwxX",
    long_flags=frozenset({"--no-signals", "--demangle", "--help", "--version"}),
    long_with_arg=frozenset(
        {"--align", "--debug", "--config", "--library", "--indent", "--output", "--where"}
    ),
)


def _tracer(spec: _Options) -> Callable[[str, Sequence[_Word]], list[_Started]]:
    """strace and ltrace: options, then the program to trace (-p PID traces others too)."""

    def run(runner: str, words: Sequence[_Word]) -> list[_Started]:
        values: list[tuple[str, str]] = []
        operands, seen = _options(runner, words, spec, values)
        if seen.keys() & _HELP:
            return []
        # strace -E VAR=VAL puts VAR in the environment of the program it starts.
        assignments = tuple(v for o, v in values if o in ("E", "--env") and "=" in v)
        return _rest(operands, assignments)

    return run


def _valgrind(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """valgrind takes values only after '=' (--tool=memcheck): the first other word runs."""
    for index, word in enumerate(words):
        text = _interpreted(runner, word)
        if text == "--":
            return _rest(words[index + 1 :])
        if not text.startswith("-") or text == "-":
            return _rest(words[index:])
        if text in ("-h", "--help", "--help-debug", "--help-dyn-options", "--version"):
            return []
        if not text.startswith("--") and text not in ("-q", "-v", "-d"):
            raise _CannotSee(f"{runner}: unknown option {text}")
    return []


def _program_first(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """busybox, toybox, catchsegv: the first word is the program (an option: it runs none)."""
    if not words:
        return []
    _check_command_word(words[0])  # where the program goes
    return [] if words[0].value.startswith("-") else _rest(words)


_FIREJAIL_RUNS_NOTHING = frozenset({"--help", "--version", "--list", "--tree", "--top"})


def _firejail(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """firejail's options are all ``--name[=value]``; the first other word is the program."""
    shell = ""
    assignments: list[str] = []
    command: Sequence[_Word] = ()
    for index, word in enumerate(words):
        text = _interpreted(runner, word)
        if text == "--":
            command = words[index + 1 :]
            break
        if not text.startswith("-") or text == "-":
            command = words[index:]
            break
        if not text.startswith("--"):
            raise _CannotSee(f"{runner}: unknown option {text}")
        name, _, value = text.partition("=")
        if name == "--shell":
            shell = value
        elif name == "--env" and "=" in value:
            _check_assigned_value(word)
            assignments.append(value)
    if not command:
        if words and {w.value for w in words} <= _FIREJAIL_RUNS_NOTHING:
            return []
        raise _CannotSee(f"{runner} without a program starts a shell or joins another sandbox")
    if shell and shell != "none":
        # With --shell=SHELL, firejail hands the words joined by spaces to SHELL -c.
        return [" ".join(_script(runner, w) for w in command)]
    return _rest(command, tuple(assignments))


#: How many values each bubblewrap option takes (bwrap reads whole words, no '=').
_BWRAP_ARITY = {
    **dict.fromkeys(
        (
            "--unshare-all", "--unshare-user", "--unshare-user-try", "--unshare-ipc",
            "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup",
            "--unshare-cgroup-try", "--share-net", "--disable-userns", "--level-prefix",
            "--assert-userns-disabled", "--clearenv", "--new-session", "--die-with-parent",
            "--as-pid-1",
        ),
        0,
    ),
    **dict.fromkeys(
        (
            "--argv0", "--chdir", "--remount-ro", "--overlay-src", "--tmp-overlay",
            "--ro-overlay", "--proc", "--exec-label", "--file-label", "--dev", "--tmpfs",
            "--mqueue", "--dir", "--lock-file", "--sync-fd", "--block-fd", "--userns-block-fd",
            "--info-fd", "--json-status-fd", "--seccomp", "--add-seccomp-fd", "--userns",
            "--userns2", "--pidns", "--unsetenv", "--uid", "--gid", "--hostname", "--cap-add",
            "--cap-drop", "--perms", "--size",
        ),
        1,
    ),
    **dict.fromkeys(
        (
            "--bind", "--bind-try", "--ro-bind", "--ro-bind-try", "--dev-bind", "--dev-bind-try",
            "--bind-fd", "--ro-bind-fd", "--file", "--bind-data", "--ro-bind-data",
            "--symlink", "--setenv", "--chmod",
        ),
        2,
    ),
    "--overlay": 3,
}  # fmt: skip


def _bwrap(runner: str, words: Sequence[_Word]) -> list[_Started]:
    assignments: list[str] = []
    i = 0
    while i < len(words):
        text = _interpreted(runner, words[i])
        if text == "--":
            i += 1
            break
        if not text.startswith("-"):
            break
        if text in ("--help", "--version"):
            return []
        if text == "--args":
            raise _CannotSee(f"{runner} --args reads more arguments from a file descriptor")
        arity = _BWRAP_ARITY.get(text)
        if arity is None:
            raise _CannotSee(f"{runner}: unknown option {text}")
        if i + arity >= len(words):
            raise TooComplex(f"{runner}: option {text} needs {arity} value(s)")
        given = [_single(runner, w) for w in words[i + 1 : i + 1 + arity]]
        if text == "--setenv":
            _check_assigned_value(words[i + 2])
            assignments.append(f"{given[0]}={given[1]}")
        i += 1 + arity
    return _rest(words[i:], tuple(assignments))


_SYSTEMD_RUN = _Options(
    flags="hrtPqGdS",
    with_arg="CHMEpu",
    long_flags=frozenset(
        {"--help", "--version", "--user", "--system", "--scope", "--slice-inherit"}
        | {"--remain-after-exit", "--send-sighup", "--wait", "--tty", "--pty", "--pipe"}
        | {"--quiet", "--on-timezone-change", "--on-clock-change", "--no-block"}
        | {"--no-ask-password", "--collect", "--same-dir", "--shell", "--ignore-failure"}
    ),
    long_with_arg=frozenset(
        {"--capsule", "--unit", "--description", "--slice", "--expand-environment", "--host"}
        | {"--machine", "--service-type", "--uid", "--gid", "--nice", "--setenv", "--property"}
        | {"--on-active", "--on-boot", "--on-startup", "--on-unit-active", "--on-calendar"}
        | {"--on-unit-inactive", "--timer-property", "--path-property", "--socket-property"}
        | {"--working-directory", "--job-mode", "--background", "--json"}
    ),
)
_RUN0 = _Options(
    flags="hV",
    with_arg="ugDa",
    long_flags=frozenset(
        {"--help", "--version", "--no-ask-password", "--slice-inherit", "--pty", "--pipe"}
    ),
    long_with_arg=frozenset(
        {"--machine", "--unit", "--property", "--description", "--slice", "--user", "--group"}
        | {"--nice", "--chdir", "--setenv", "--background", "--shell-prompt-prefix"}
        | {"--lightweight", "--area"}
    ),
)
_PROPERTY_OPTIONS = frozenset(
    {"p", "--property", "--timer-property", "--path-property", "--socket-property"}
)
_FALSE = frozenset({"0", "no", "false", "off", "n", "f"})


def _systemd_run(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """systemd-run and run0: options, then the command the transient unit runs."""
    values: list[tuple[str, str]] = []
    operands, seen = _options(runner, words, _RUN0 if runner == "run0" else _SYSTEMD_RUN, values)
    if seen.keys() & _HELP:
        return []
    for option, value in values:
        key = value.partition("=")[0].strip()
        if option in _PROPERTY_OPTIONS and key.startswith(("Exec", "Environment")):
            raise _CannotSee(f"{runner} -p {key}= sets a command or environment the unit runs")
    assignments = tuple(v for o, v in values if o in ("E", "--setenv") and "=" in v)
    if not operands:
        if runner == "run0" or seen.keys() & {"S", "--shell"}:
            raise _CannotSee(f"{runner} without a command starts a shell that reads its input")
        return []
    expands = runner != "run0" and seen.get("--expand-environment", "yes").lower() not in _FALSE
    for word in operands:
        if (expands and "$" in word.value) or "%" in word.value:
            raise _CannotSee(
                f"{runner} expands $VARIABLES and %specifiers in the command it runs ({word.raw})"
            )
    return _rest(operands, assignments)


_SSH = _Options(flags="46AaCfGgKkMNnqsTtVvXxYy", with_arg="BbcDEeFIiJLlmOoPpQRSWw")
#: ssh options after which it runs no remote command: no session, stdio forwarding, a
#: subsystem, a control command, a query, its version or configuration.
_SSH_RUNS_NOTHING = frozenset("NWsOQVG")


def _ssh(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """``ssh [opts] HOST [opts] [COMMAND…]``: the remote shell runs the words joined by spaces."""
    values: list[tuple[str, str]] = []
    operands, seen = _options(runner, words, _SSH, values)
    rest: list[_Word] = []
    if operands:
        at = len(words) - len(operands)
        _single(runner, operands[0])  # the destination
        rest = operands[1:]
        if rest and not (at > 0 and words[at - 1].value == "--"):
            rest, more = _options(runner, rest, _SSH, values)  # ssh reads options after HOST too
            seen.update(more)
    if seen.keys() & _SSH_RUNS_NOTHING or not operands:
        return []
    for option, value in values:
        key = re.split(r"[\s=]", value.strip(), maxsplit=1)[0].lower()
        if option == "o" and (key.endswith("command") or key == "match"):
            raise _CannotSee(f"ssh -o {key} runs a command given as text")
    if not rest:
        raise _CannotSee("ssh without a command starts a remote shell that reads its input")
    try:
        script = " ".join(_script(runner, w) for w in rest)
        segments(script)  # the remote login shell parses it: it must be judged as one
    except TooComplex as exc:
        raise _CannotSee(f"ssh runs a remote command that cannot be judged: {exc}") from None
    return [script]


#: capsh hands what follows '--' to /bin/bash (or to --shell=PATH).
_BASH = _Word(value="/bin/bash", raw="/bin/bash", literal="/bin/bash")


def _capsh(runner: str, words: Sequence[_Word]) -> list[_Started]:
    shell = _BASH
    for index, word in enumerate(words):
        text = _interpreted(runner, word)
        if text == "--":
            return [_Inner([shell, *words[index + 1 :]])]
        if text == "==":
            raise _CannotSee(f"{runner} == runs capsh again with the arguments that follow")
        if text.startswith("--shell="):
            path = text.removeprefix("--shell=")
            shell = _Word(value=path, raw=word.raw, expanded=word.expanded, literal=path)
        elif not text.startswith("--"):
            raise _CannotSee(f"{runner}: unknown argument {text}")
    return []


_AT = _Options(flags="VmMblrdcvKh", with_arg="qftu")


def _at(runner: str, words: Sequence[_Word]) -> list[_Started]:
    """at and batch run the commands they read from their input, later."""
    _, seen = _options(runner, words, _AT)
    if seen.keys() & set("lrdcVhf"):
        return []  # listing, removing, showing jobs, or a job from a file (a script)
    raise _CannotSee(f"{runner} reads the commands it runs from its input, which is not judged")


_UNBUFFER = _Options(flags="p")
_EATMYDATA = _Options(flags="h", long_flags=frozenset({"--help", "--version"}))
_CGEXEC = _Options(flags="h", with_arg="g", long_flags=frozenset({"--sticky", "--help"}))
_CHRONIC = _Options(flags="evE")
_DBUS_RUN_SESSION = _Options(
    long_flags=frozenset({"--help", "--version"}),
    long_with_arg=frozenset({"--config-file", "--dbus-daemon"}),
)


def _unjudged(why: str, *harmless: str) -> Callable[[str, Sequence[_Word]], list[_Started]]:
    """A runner of code the splitter cannot read; ``harmless`` argument lists run nothing."""

    def run(runner: str, words: Sequence[_Word]) -> list[_Started]:
        if words and " ".join(w.raw for w in words) in harmless:
            return []
        raise _CannotSee(f"{runner} {why}")

    return run


#: Builtins whose arguments _check_builtin_arguments looks at.
_CHECKED_BUILTINS = frozenset({"test", "[", "printf", "read", "export"})

#: Builtins that only print or test their words: no word of theirs names a program.
_PRINTS_ONLY = frozenset({"echo", "printf", "type", "test", "[", "true", "false", ":", "help"})

#: Runners whose meaning changes with words added at the end (find -exec, su -c, a
#: watch or ssh script): refused under xargs, which appends words from its input.
_READS_ALL_ARGUMENTS = frozenset({"find", "su", "runuser", "script", "watch", "ssh", "firejail"})

_RunnerFunction = Callable[[str, Sequence[_Word]], list[_Started]]

#: Runners whose command the splitter finds: it becomes a segment of its own.
_JUDGED: dict[str, _RunnerFunction] = {
    "env": _env,
    "command": _command,
    "builtin": _builtin,
    "exec": _simple_runner(_EXEC),
    "noglob": _builtin,
    "-": _builtin,
    "nocorrect": _builtin,
    "time": _simple_runner(_TIME),
    "nohup": _simple_runner(_NOHUP),
    "setsid": _simple_runner(_SETSID),
    "timeout": _timeout,
    "nice": _simple_runner(_NICE),
    "ionice": _ionice,
    "chrt": _chrt,
    "taskset": _taskset,
    "numactl": _numactl,
    "prlimit": _prlimit,
    "choom": _choom,
    "uclampset": _uclampset,
    "stdbuf": _simple_runner(_STDBUF),
    "unbuffer": _simple_runner(_UNBUFFER),
    "flock": _flock,
    "setarch": _setarch,
    **dict.fromkeys(_SETARCH_ALIASES, _setarch),
    "chroot": _chroot,
    "unshare": _shell_when_bare(_UNSHARE),
    "nsenter": _shell_when_bare(_NSENTER),
    "setpriv": _setpriv,
    "capsh": _capsh,
    "runcon": _runcon,
    "cgexec": _simple_runner(_CGEXEC),
    "sudo": _sudo,
    "doas": _doas,
    "su": lambda runner, words: _command_string(runner, words, _SU),
    "runuser": _runuser,
    "sg": _sg,
    "pkexec": _shell_when_bare(_PKEXEC),
    "run0": _systemd_run,
    "systemd-run": _systemd_run,
    "gosu": _user_then_command,
    "su-exec": _user_then_command,
    "fakeroot": _shell_when_bare(_FAKEROOT),
    "eatmydata": _simple_runner(_EATMYDATA),
    "chronic": _simple_runner(_CHRONIC),
    "dbus-run-session": _simple_runner(_DBUS_RUN_SESSION),
    "strace": _tracer(_STRACE),
    "ltrace": _tracer(_LTRACE),
    "valgrind": _valgrind,
    "catchsegv": _program_first,
    "firejail": _firejail,
    "bwrap": _bwrap,
    "busybox": _program_first,
    "toybox": _program_first,
    "script": lambda runner, words: _command_string(runner, words, _SCRIPT),
    "watch": _watch,
    "xargs": _xargs,
    "find": _find,
    "ssh": _ssh,
    **dict.fromkeys(_POSIX_SHELLS, _shell),
}

#: Runners of code the splitter cannot read: refused when a deny or ask rule could apply.
_UNJUDGED: dict[str, _RunnerFunction] = {
    "gdb": _unjudged(
        "runs commands in its own language (-ex, -x, its input), which are not judged",
        "--version",
        "--help",
    ),
    "expect": _unjudged("runs Tcl code (-c, a script, its input), which is not judged", "-v"),
    "parallel": _unjudged(
        "builds the commands it runs from templates and its input, which are not judged",
        "--version",
        "--help",
    ),
    "sem": _unjudged("(GNU parallel) builds the commands it runs, which are not judged"),
    "tmux": _unjudged(
        "runs shell commands given as text in its commands and formats, which are not judged",
        "-V",
    ),
    "screen": _unjudged(
        "runs commands in its windows and its command language, which are not judged",
        "-ls",
        "-list",
        "-v",
        "--version",
    ),
    "newgrp": _newgrp,
    "sparc32bash": _sparc32bash,
    "at": _at,
    "batch": _at,
}

#: Programs refused whatever the rules say: shells whose language this does not read.
_ALWAYS_REFUSED: dict[str, _RunnerFunction] = dict.fromkeys(_OTHER_SHELLS, _other_shell)

_RUNNERS: dict[str, _RunnerFunction] = {**_JUDGED, **_UNJUDGED, **_ALWAYS_REFUSED}

#: Every program the splitter knows to run another program, and how it treats it:
#: "judged" (the command it starts is a segment of its own), "unjudged" (refused when a
#: deny or ask rule could apply; ``at`` and ``batch`` only when they read commands from
#: their input) or "refused" (refused whatever the rules say). docs/governance.md lists
#: them all; a test checks the two agree.
RUNNERS: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(_JUDGED, "judged"),
        **dict.fromkeys(_UNJUDGED, "unjudged"),
        **dict.fromkeys(_ALWAYS_REFUSED, "refused"),
    }
)


#: Program names :meth:`_Parser._emit` must look at more closely.
_NEEDS_A_LOOK = frozenset(_RUNNERS) | frozenset(_REFUSED) | _CHECKED_BUILTINS


# -- $'…' ----------------------------------------------------------------------


def _ansi_c(s: str, start: int) -> tuple[str, int]:
    """Decode bash's ``$'…'`` from ``start`` (after the quote); the text and where it ends.

    ``\\xHH`` and octal escapes are bytes, as in bash: ``$'\\xe2\\x80\\x99'`` is one
    UTF-8 character.
    """
    out: list[str] = []
    pending = bytearray()
    n = len(s)
    j = start

    def flush() -> None:
        if pending:
            out.append(pending.decode("utf-8", "surrogateescape"))
            pending.clear()

    while j < n:
        c = s[j]
        if c == "'":
            flush()
            text = "".join(out)
            if "\0" in text:
                raise TooComplex("has a NUL byte in $'…'")
            return text, j + 1
        if c != "\\" or j + 1 >= n:
            flush()
            out.append(c)
            j += 1
            continue
        e = s[j + 1]
        j += 2
        if e in "01234567":
            digits = re.match(r"[0-7]{0,2}", s[j : j + 2])
            assert digits is not None
            pending.append(int(e + digits.group(), 8) & 0xFF)
            j += digits.end()
            continue
        if e == "x":
            digits = re.match(r"[0-9A-Fa-f]{1,2}", s[j : j + 2])
            if digits is not None:
                pending.append(int(digits.group(), 16))
                j += digits.end()
                continue
        flush()
        if e in _ANSI_SIMPLE:
            out.append(_ANSI_SIMPLE[e])
        elif e in "uU":
            width = 4 if e == "u" else 8
            digits = re.match(rf"[0-9A-Fa-f]{{1,{width}}}", s[j : j + width])
            if digits is None:
                out.append("\\" + e)
                continue
            code = int(digits.group(), 16)
            if code > 0x10FFFF:
                raise TooComplex("has an invalid \\U escape in $'…'")
            out.append(chr(code))
            j += digits.end()
        elif e == "c" and j < n:
            out.append(chr(ord(s[j]) & 0x1F))
            j += 1
        else:
            out.append("\\" + e)
    raise TooComplex("has an unterminated $'…'")
